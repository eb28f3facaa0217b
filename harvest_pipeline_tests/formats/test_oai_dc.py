"""oai_dc:dc records: multiple titles/languages, sparse records, odd namespace declarations."""

from __future__ import annotations

import pytest

from harvest_pipeline.formats import MappingError, map_record
from harvest_pipeline.formats.oai_dc import map_dc

from .conftest import load_sample, parse_xml


def test_full_record():
    r = map_record(load_sample("oai_dc_full.xml"))
    # whitespace collapsed, xml:lang variants kept in order, exact repeat dropped
    assert r.title == "Sediment cores from the Baltic Sea, 2003-2011"
    assert r.titles == [r.title, "Sedimentkerne aus der Ostsee, 2003-2011"]
    assert r.creators == ["Lindqvist, Anna", "Müller, Jörg"]  # contributor is not a creator
    assert r.subjects == ["sediment", "Sediment", "paleoclimate"]  # empty one dropped, case kept
    assert r.description == (
        "Gravity cores were taken at twelve stations.\nEach core was split and logged.\n\n"
        "Radiocarbon ages are given in the supplement."
    )
    assert r.dates == ["2012-03-15", "2011"] and r.date == "2012-03-15"
    assert r.type == "Dataset"
    assert r.language == "eng"
    assert r.identifiers == [
        "https://hdl.handle.net/20.500.12345/678",
        "doi:10.5072/Baltic.Cores.2012",
        "https://repository.example.org/record/678",
    ]
    assert r.doi == "10.5072/baltic.cores.2012"
    assert r.url == "https://hdl.handle.net/20.500.12345/678"
    assert r.rights == ["Creative Commons Attribution 4.0 International", "info:eu-repo/semantics/openAccess"]
    assert r.bbox is None
    assert r.format_name == "oai_dc"


def test_identifier_only():
    r = map_record(load_sample("oai_dc_identifier_only.xml"))
    assert r.identifiers == ["10.5072/ONLY-AN-ID"] and r.doi == "10.5072/only-an-id"
    assert r.title is None and r.titles == [] and r.url is None and r.date is None and r.creators == []


def test_namespaces_declared_on_children_and_unusual_prefixes():
    r = map_record(load_sample("oai_dc_odd_namespaces.xml"))
    assert r.title == "Über die Ostsee"
    assert r.creators == ["Ostrowski, Piotr"]
    assert r.dates == [] and r.date is None  # blank date dropped
    assert r.description == "A bold claim."  # mixed content flattened
    assert r.identifiers == ["http://dx.doi.org/10.5072/ABC%2Fdef", "urn:nbn:de:0000-12345"]
    assert r.doi == "10.5072/abc/def"
    assert r.url is None  # the only http identifier is a DOI resolver


def test_default_namespace_root_with_dcterms():
    r = map_record(load_sample("oai_dc_default_ns_dcterms.xml"))
    assert r.titles == ["Field notes", "Notebooks of the 1921 expedition"]
    assert r.description == "Scanned notebooks."  # dct:abstract wins over dc:description
    assert r.dates == ["2019-05-01", "1922"] and r.date == "1922"  # issued beats modified
    assert r.doi == "10.5072/field.notes"
    assert r.rights == ["https://creativecommons.org/publicdomain/mark/1.0/"]


def test_empty_and_unqualified_children():
    empty = map_record(parse_xml('<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/"/>'))
    assert empty.title is None and empty.identifiers == [] and empty.format_name == "oai_dc"
    # some servers drop the dc namespace on the children
    r = map_record(
        parse_xml(
            '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/">'
            "<title>Plain</title><creator>Anon</creator><identifier>https://x.example/1</identifier></oai_dc:dc>"
        )
    )
    assert (r.title, r.creators, r.url) == ("Plain", ["Anon"], "https://x.example/1")


def test_mapper_is_usable_without_the_registry():
    r = map_dc(load_sample("oai_dc_full.xml"))
    assert r.format_name == "oai_dc" and r.title


# Dublin Core application profiles: a root of their own around dc: and dcterms: elements. Written
# for these tests after DSpace's `qdc` and NSDL's `nsdl_dc` output.
_DSPACE_QDC = """
<qdc:qualifieddc xmlns:qdc="http://dspace.org/qualifieddc/" xmlns:dc="http://purl.org/dc/elements/1.1/"
                 xmlns:dcterms="http://purl.org/dc/terms/">
  <dc:title>Sediment cores of the northern fjords</dc:title>
  <dcterms:alternative>Fjord cores</dcterms:alternative>
  <dc:creator>Lindqvist, Maja</dc:creator>
  <dcterms:abstract>Cores taken in 2019 and 2020.</dcterms:abstract>
  <dcterms:issued>2021-05-04</dcterms:issued>
  <dc:identifier>https://repository.example.org/handle/123/456</dc:identifier>
  <dc:language>en</dc:language>
</qdc:qualifieddc>
"""

_NSDL_DC = """
<nsdl_dc:nsdl_dc xmlns:nsdl_dc="http://ns.nsdl.org/nsdl_dc_v1.02/" xmlns:dc="http://purl.org/dc/elements/1.1/"
                 xmlns:dct="http://purl.org/dc/terms/" xmlns:lar="http://ns.nsdl.org/schemas/dc/lar"
                 schemaVersion="1.02.000">
  <dc:identifier>Sample 77</dc:identifier>
  <dc:title>Crystal structure of sample 77</dc:title>
  <dct:educationLevel>Higher Education</dct:educationLevel>
  <dc:subject>Chemistry</dc:subject>
  <lar:readiness>Published</lar:readiness>
  <dc:date>2002-09-19</dc:date>
</nsdl_dc:nsdl_dc>
"""


@pytest.mark.parametrize("payload, title, date", [
    (_DSPACE_QDC, "Sediment cores of the northern fjords", "2021-05-04"),
    (_NSDL_DC, "Crystal structure of sample 77", "2002-09-19"),
])
def test_a_root_of_dublin_core_elements_is_read_as_dublin_core(payload, title, date):
    r = map_record(parse_xml(payload))
    assert r.format_name == "dublin_core"
    assert r.title == title and r.date == date


def test_dspace_qdc_reads_its_qualified_elements():
    r = map_record(parse_xml(_DSPACE_QDC))
    assert r.titles == ["Sediment cores of the northern fjords", "Fjord cores"]
    assert r.description == "Cores taken in 2019 and 2020."
    assert r.creators == ["Lindqvist, Maja"] and r.language == "en"
    assert r.url == "https://repository.example.org/handle/123/456"


def test_a_root_of_mostly_other_elements_is_not_read_as_dublin_core():
    payload = """<rec xmlns="urn:example:rec" xmlns:dc="http://purl.org/dc/elements/1.1/">
      <dc:title>only this one</dc:title><name>a</name><place>b</place></rec>"""
    with pytest.raises(MappingError, match="no mapper for metadata root 'rec'"):
        map_record(parse_xml(payload))


_OAI_DC = ('<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
           'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:dcterms="http://purl.org/dc/terms/">{}</oai_dc:dc>')


@pytest.mark.parametrize(("coverage", "bbox"), [
    # a place name first, then the DCMI Box (signed decimal degrees, any order of its parts)
    ("<dc:coverage>Sydney Harbour</dc:coverage><dc:coverage>northlimit=-33.7; southlimit=-34.5; "
     "westlimit=150.7; eastlimit=151.3; units=signed decimal degrees; projection=WGS84</dc:coverage>",
     (150.7, -34.5, 151.3, -33.7)),
    # DCMI Point in dcterms:spatial: a point's box
    ("<dcterms:spatial>east=148.26218; north=-36.45746; name=Perisher Valley</dcterms:spatial>",
     (148.26218, -36.45746, 148.26218, -36.45746)),
    # a box in metres (a projection's coordinates) is not degrees: no box
    ("<dc:coverage>northlimit=6000000; southlimit=5900000; westlimit=300000; eastlimit=400000; "
     "units=m; projection=UTM zone 55</dc:coverage>", None),
    ("<dc:coverage>1921-1922</dc:coverage>", None),
])
def test_a_dcmi_box_or_point_in_coverage_is_the_records_box(coverage, bbox):
    r = map_record(parse_xml(_OAI_DC.format(f"<dc:title>Survey</dc:title>{coverage}")))
    assert r.bbox == bbox
    assert r.subjects == []  # coverage is not a subject
