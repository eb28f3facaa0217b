"""Dispatch by root namespace + local name, MappingError, and the to_row contract for every sample."""

from __future__ import annotations

import math

import pytest
from lxml import etree

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.formats import (
    MAPPER_MODULES,
    ROW_KEYS,
    MappingError,
    NormalizedRecord,
    known_formats,
    map_record,
    mapper_for,
    register,
    unregister,
)
from harvest_pipeline.formats import datacite, iso19139, marcxml, mods, oai_dc

from .conftest import SAMPLES, load_sample, parse_xml

EXPECTED_FORMAT = {
    "oai_dc_full.xml": "oai_dc",
    "oai_dc_identifier_only.xml": "oai_dc",
    "oai_dc_odd_namespaces.xml": "oai_dc",
    "oai_dc_default_ns_dcterms.xml": "oai_dc",
    "csw_record_epsg4326_latlon.xml": "csw_record",
    "csw_record_crs84_lonlat.xml": "csw_record",
    "csw_summary_projected_then_wgs84.xml": "csw_record",
    "csw_brief_wrong_axis_order.xml": "csw_record",
    "datacite4_full.xml": "datacite",
    "datacite4_given_family_only.xml": "datacite",
    "oai_datacite_kernel3.xml": "oai_datacite",
    "iso19139_full.xml": "iso19139",
    "iso19139_anchor_no_bbox.xml": "iso19139",
    "gmi_mi_metadata.xml": "iso19139",
    "marc_book_doi.xml": "marcxml",
    "marc_collection_map.xml": "marcxml",
    "mods_full.xml": "mods",
    "arxiv_full.xml": "arxiv",
    "oai_doaj_article.xml": "oai_doaj",
    "pos_ext_dc.xml": "pos_ext_dc",
}


def test_every_sample_file_is_covered():
    assert sorted(p.name for p in SAMPLES.glob("*.xml")) == sorted(EXPECTED_FORMAT)


@pytest.mark.parametrize("name", sorted(EXPECTED_FORMAT))
def test_dispatch_and_row_contract(name):
    record = map_record(load_sample(name))
    assert isinstance(record, NormalizedRecord)
    assert record.format_name == EXPECTED_FORMAT[name]
    row = record.to_row()
    assert list(row) == list(ROW_KEYS)
    for key in ("creators", "subjects", "dates", "identifiers", "rights"):
        assert isinstance(row[key], list) and all(isinstance(v, str) and v and v == v.strip() for v in row[key])
        assert len(row[key]) == len(set(row[key])), f"{key} has duplicates"
    for key in ("title", "description", "date", "type", "language", "doi", "url"):
        assert row[key] is None or (isinstance(row[key], str) and row[key] and row[key] == row[key].strip())
    corners = [row[k] for k in ("bbox_west", "bbox_south", "bbox_east", "bbox_north")]
    assert all(c is None for c in corners) or all(isinstance(c, float) and math.isfinite(c) for c in corners)
    # main values lead their lists
    assert record.title == (record.titles[0] if record.titles else None)
    assert record.date is None or record.date in record.dates
    assert record.doi is None or record.doi == record.doi.lower() and record.doi.startswith("10.")
    assert row["format_name"] == EXPECTED_FORMAT[name]


def test_mapper_for_picks_by_namespace_and_root():
    assert mapper_for(load_sample("oai_dc_full.xml")) is oai_dc.map_dc
    assert mapper_for(load_sample("csw_record_crs84_lonlat.xml")) is oai_dc.map_dc
    assert mapper_for(load_sample("datacite4_full.xml")) is datacite.map_resource
    assert mapper_for(load_sample("oai_datacite_kernel3.xml")) is datacite.map_oai_datacite
    assert mapper_for(load_sample("gmi_mi_metadata.xml")) is iso19139.map_iso19139
    assert mapper_for(load_sample("marc_collection_map.xml")) is marcxml.map_collection
    assert mapper_for(load_sample("mods_full.xml")) is mods.map_mods
    # accepts an ElementTree too
    assert mapper_for(etree.ElementTree(load_sample("marc_book_doi.xml"))) is marcxml.map_marc


def test_known_formats_lists_every_registration():
    names = {f.name for f in known_formats()}
    assert names == {"oai_dc", "csw_record", "datacite", "oai_datacite", "iso19139", "marcxml", "mods", "arxiv", "oai_doaj", "pos_ext_dc"}
    roots = {(f.namespace, f.root_local_name) for f in known_formats()}
    assert ("http://www.openarchives.org/OAI/2.0/oai_dc/", "dc") in roots
    assert ("http://www.opengis.net/cat/csw/2.0.2", "BriefRecord") in roots
    assert ("http://datacite.org/schema/kernel-3", "resource") in roots
    assert ("http://schema.datacite.org/oai/oai-1.0/", "oai_datacite") in roots
    assert ("http://www.isotc211.org/2005/gmd", "MD_Metadata") in roots
    assert ("http://www.loc.gov/MARC21/slim", "record") in roots
    assert ("http://www.loc.gov/mods/v3", "mods") in roots


def test_unknown_root_raises_mapping_error():
    # arXiv's other format (arXivRaw): no mapper reads it
    el = parse_xml('<arXivRaw xmlns="http://arxiv.org/OAI/arXivRaw/"><title>t</title></arXivRaw>')
    with pytest.raises(MappingError) as info:
        map_record(el)
    err = info.value
    assert isinstance(err, HarvestError)
    assert "arXivRaw" in str(err) and "http://arxiv.org/OAI/arXivRaw/" in str(err)
    assert err.root == "{http://arxiv.org/OAI/arXivRaw/}arXivRaw" and err.format_name is None
    with pytest.raises(MappingError):
        mapper_for(el)


def test_known_root_in_wrong_namespace_names_the_alternatives():
    # oai_dc namespace without its trailing slash: a common server-side typo
    el = parse_xml('<dc xmlns="http://www.openarchives.org/OAI/2.0/oai_dc"><title/></dc>')
    with pytest.raises(MappingError, match=r"oai_dc \(\{http://www.openarchives.org/OAI/2.0/oai_dc/\}dc\)"):
        map_record(el)


def test_unqualified_root_and_non_elements():
    with pytest.raises(MappingError, match="'record' in namespace '\\(none\\)'"):
        map_record(parse_xml("<record><leader/></record>"))
    with pytest.raises(MappingError, match="deleted record"):
        map_record(None)
    with pytest.raises(MappingError):
        map_record(etree.Comment("x"))
    with pytest.raises(MappingError):
        map_record("<dc/>")


def test_register_custom_mapper_and_conflicts():
    ns = "urn:example:test-format"

    def mapper(el):
        return NormalizedRecord(title=el.get("t"))

    register(ns, "thing", mapper, "test_thing")
    try:
        record = map_record(parse_xml(f'<thing xmlns="{ns}" t="hello"/>'))
        assert record.title == "hello" and record.format_name == "test_thing"
        register(ns, "thing", mapper, "test_thing")  # same again: harmless
        with pytest.raises(ValueError, match="already mapped"):
            register(ns, "thing", lambda el: NormalizedRecord(), "other")
        register(ns, "thing", lambda el: NormalizedRecord(title="replaced"), "other", replace=True)
        assert map_record(parse_xml(f'<thing xmlns="{ns}"/>')).title == "replaced"
    finally:
        unregister(ns, "thing")
    with pytest.raises(MappingError):
        map_record(parse_xml(f'<thing xmlns="{ns}"/>'))
    with pytest.raises(ValueError):
        register(ns, "", mapper, "x")


def test_mapper_failures_become_mapping_errors_naming_the_format():
    ns = "urn:example:broken"

    def broken(el):
        raise ValueError("bad coordinate 'abc'")

    def refusing(el):
        raise MappingError("nothing inside")

    register(ns, "broken", broken, "broken_fmt")
    register(ns, "refusing", refusing, "refusing_fmt")
    try:
        with pytest.raises(MappingError) as info:
            map_record(parse_xml(f'<broken xmlns="{ns}"/>'))
        assert "broken_fmt" in str(info.value) and "bad coordinate" in str(info.value)
        assert info.value.format_name == "broken_fmt" and isinstance(info.value.__cause__, ValueError)
        with pytest.raises(MappingError) as info:
            map_record(parse_xml(f'<refusing xmlns="{ns}"/>'))
        assert str(info.value).startswith("format 'refusing_fmt' (root {urn:example:broken}refusing): nothing inside")
        assert info.value.root == "{urn:example:broken}refusing"
    finally:
        unregister(ns, "broken")
        unregister(ns, "refusing")


def test_mapping_error_takes_harvest_context():
    err = MappingError("no mapper").with_context(source_id="zenodo", url="https://x.example/oai")
    assert "source=zenodo" in str(err) and "url=https://x.example/oai" in str(err)


def test_mapper_modules_declare_registrations():
    import importlib

    for name in MAPPER_MODULES:
        module = importlib.import_module(f"harvest_pipeline.formats.{name}")
        assert module.REGISTRATIONS and all(len(r) == 4 and callable(r[2]) for r in module.REGISTRATIONS)


def test_formats_package_does_not_import_dagster():
    import subprocess
    import sys

    code = "import sys, harvest_pipeline.formats; sys.exit(1 if any(m.split('.')[0] == 'dagster' for m in sys.modules) else 0)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize(
    "payload",
    [
        # Dublin Core elements in a namespace the mapper does not know
        '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" xmlns:x="urn:not-dc">'
        "<x:title>A title</x:title><x:creator>Someone</x:creator></oai_dc:dc>",
        # a DataCite resource whose children sit in another namespace
        '<resource xmlns="http://datacite.org/schema/kernel-4"><t:titles xmlns:t="urn:x">'
        "<t:title>A title</t:title></t:titles></resource>",
    ],
)
def test_a_mapper_that_gets_nothing_out_of_a_non_empty_payload_reports_it(payload):
    element = etree.fromstring(payload.encode())
    with pytest.raises(MappingError) as info:
        map_record(element)
    msg = str(info.value)
    assert "nothing" in msg and "A title" not in msg and info.value.format_name in ("oai_dc", "datacite")


def test_an_empty_payload_is_not_a_mapping_error():
    r = map_record(etree.fromstring(b'<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/"/>'))
    assert r.format_name == "oai_dc" and r.title is None
