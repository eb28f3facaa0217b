"""The GetRecords documents we send: structure, namespaces, dates, SortBy, the ANDed extra filter."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from lxml import etree

from harvest_pipeline.csw import CSW_NS, WindowConstraint, build_filter, build_get_records, format_instant
from harvest_pipeline.csw.build import NAMESPACES, build_get_record_by_id, parse_extra_filter

OGC = "{http://www.opengis.net/ogc}"
CSWT = "{http://www.opengis.net/cat/csw/2.0.2}"
START = datetime(2026, 11, 1, tzinfo=timezone.utc)
END = START + timedelta(days=1)
LIKE = ('<ogc:PropertyIsLike wildCard="%" singleChar="_" escapeChar="\\">'
        "<ogc:PropertyName>dc:subject</ogc:PropertyName><ogc:Literal>%optics%</ogc:Literal></ogc:PropertyIsLike>")


def shape(el) -> list:
    """The element tree as nested (tag, attributes, text, children) tuples, comments dropped."""
    return [el.tag, dict(el.attrib), (el.text or "").strip() or None,
            [shape(c) for c in el if isinstance(c.tag, str)]]


def parse(doc: bytes):
    assert doc.startswith(b"<?xml version='1.0' encoding='UTF-8'?>")
    return etree.fromstring(doc)


def test_window_request_has_the_exact_structure():
    doc = build_get_records(
        type_names="csw:Record", output_schema=CSW_NS, element_set="full",
        constraint=WindowConstraint(START, END, "dct:modified"), start_position=41, max_records=20,
        sort_by="dct:modified",
    )
    root = parse(doc)
    comparison = lambda op, lit: [f"{OGC}{op}", {}, None, [  # noqa: E731
        [f"{OGC}PropertyName", {}, "dct:modified", []], [f"{OGC}Literal", {}, lit, []]]]
    assert shape(root) == [
        f"{CSWT}GetRecords",
        {
            "service": "CSW", "version": "2.0.2", "resultType": "results", "startPosition": "41",
            "maxRecords": "20", "outputFormat": "application/xml", "outputSchema": CSW_NS,
            "{http://www.w3.org/2001/XMLSchema-instance}schemaLocation":
                f"{CSW_NS} http://schemas.opengis.net/csw/2.0.2/CSW-discovery.xsd",
        },
        None,
        [[f"{CSWT}Query", {"typeNames": "csw:Record"}, None, [
            [f"{CSWT}ElementSetName", {}, "full", []],
            [f"{CSWT}Constraint", {"version": "1.1.0"}, None, [
                [f"{OGC}Filter", {}, None, [
                    [f"{OGC}And", {}, None, [
                        comparison("PropertyIsGreaterThanOrEqualTo", "2026-11-01T00:00:00Z"),
                        comparison("PropertyIsLessThan", "2026-11-02T00:00:00Z"),
                    ]],
                ]],
            ]],
            [f"{OGC}SortBy", {}, None, [
                [f"{OGC}SortProperty", {}, None, [
                    [f"{OGC}PropertyName", {}, "dct:modified", []], [f"{OGC}SortOrder", {}, "ASC", []]]],
            ]],
        ]]],
    ]


def test_every_prefix_used_in_qnames_is_declared_on_the_root():
    doc = build_get_records(
        type_names="gmd:MD_Metadata", output_schema="http://www.isotc211.org/2005/gmd",
        constraint=WindowConstraint(START, END, "apiso:Modified"), sort_by="apiso:Modified",
    )
    root = parse(doc)
    # typeNames and PropertyName are QNames in text/attributes: their prefixes must be in scope.
    assert root.nsmap == NAMESPACES
    query = root.find(f"{CSWT}Query")
    prefix = query.get("typeNames").split(":")[0]
    assert query.nsmap[prefix] == "http://www.isotc211.org/2005/gmd"
    names = [el.text for el in root.iter(f"{OGC}PropertyName")]
    assert names == ["apiso:Modified"] * 3
    assert root.nsmap["apiso"] == "http://www.opengis.net/cat/csw/apiso/1.0"
    # One declaration block, on the root only.
    assert doc.count(b"xmlns:ogc=") == 1 and doc.count(b"xmlns:") == len(NAMESPACES)


def test_extra_filter_is_anded_after_the_window():
    flt = build_filter(WindowConstraint(START, END, "dct:modified", LIKE))
    conj = flt[0]
    assert conj.tag == f"{OGC}And"
    assert [c.tag for c in conj] == [f"{OGC}PropertyIsGreaterThanOrEqualTo", f"{OGC}PropertyIsLessThan", f"{OGC}PropertyIsLike"]
    like = conj[2]
    assert like.attrib == {"wildCard": "%", "singleChar": "_", "escapeChar": "\\"}
    assert like.findtext(f"{OGC}PropertyName") == "dc:subject"
    # A whole <ogc:Filter> works too, and an And inside it is kept as one term.
    wrapped = f"<ogc:Filter><ogc:And>{LIKE}{LIKE}</ogc:And></ogc:Filter>"
    conj = build_filter(WindowConstraint(START, END, "dct:modified", wrapped))[0]
    assert [c.tag for c in conj][-1] == f"{OGC}And" and len(conj) == 3


def test_only_one_bound_needs_no_and_and_no_constraint_means_no_filter():
    flt = build_filter(WindowConstraint(START, None, "dct:modified"))
    assert [c.tag for c in flt] == [f"{OGC}PropertyIsGreaterThanOrEqualTo"]
    assert build_filter(WindowConstraint(None, None, "dct:modified")) is None
    assert build_filter(None) is None
    root = parse(build_get_records(type_names="csw:Record", output_schema=CSW_NS))
    assert root.find(f"{CSWT}Query/{CSWT}Constraint") is None
    assert root.find(f"{CSWT}Query/{OGC}SortBy") is None


def test_dates_are_iso_8601_utc_with_z():
    assert format_instant(START) == "2026-11-01T00:00:00Z"
    plus_two = datetime(2026, 11, 1, 2, 30, tzinfo=timezone(timedelta(hours=2)))
    assert format_instant(plus_two) == "2026-11-01T00:30:00Z"
    assert format_instant(START.replace(microsecond=250000)) == "2026-11-01T00:00:00.250000Z"
    assert format_instant("2026-11-01T01:00:00+01:00") == "2026-11-01T00:00:00Z"
    assert format_instant("2026-11-01") == "2026-11-01T00:00:00Z"
    with pytest.raises(ValueError, match="naive"):
        format_instant(datetime(2026, 11, 1))
    with pytest.raises(ValueError, match="ISO 8601"):
        format_instant("yesterday")


def test_hits_requests_and_element_sets():
    root = parse(build_get_records(type_names="csw:Record", output_schema=CSW_NS, element_set="brief",
                                   result_type="hits", max_records=0))
    assert root.get("resultType") == "hits" and root.get("maxRecords") == "0"
    assert root.findtext(f"{CSWT}Query/{CSWT}ElementSetName") == "brief"
    with pytest.raises(ValueError, match="element_set"):
        build_get_records(type_names="csw:Record", output_schema=CSW_NS, element_set="everything")
    with pytest.raises(ValueError, match="start_position"):
        build_get_records(type_names="csw:Record", output_schema=CSW_NS, start_position=0)


def test_bad_settings_fail_with_what_to_fix():
    with pytest.raises(ValueError, match="known prefix"):
        build_get_records(type_names="gn:Thing", output_schema=CSW_NS)
    with pytest.raises(ValueError, match="known prefix"):
        build_filter(WindowConstraint(START, END, "foo:modified"))
    with pytest.raises(ValueError, match="not an OGC Filter Encoding"):
        parse_extra_filter("<dc:subject>x</dc:subject>")
    with pytest.raises(ValueError, match="well-formed"):
        parse_extra_filter("<ogc:PropertyIsLike>")
    with pytest.raises(ValueError, match="text outside"):
        parse_extra_filter(f"oops {LIKE}")
    with pytest.raises(ValueError, match="empty"):
        parse_extra_filter("<!-- nothing -->")


def test_get_record_by_id_document():
    root = parse(build_get_record_by_id(["a", "b"], output_schema=CSW_NS, element_set="brief"))
    assert root.tag == f"{CSWT}GetRecordById"
    assert [el.text for el in root.findall(f"{CSWT}Id")] == ["a", "b"]
    assert root.findtext(f"{CSWT}ElementSetName") == "brief"
