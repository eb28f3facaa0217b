"""Reading CSW responses from canned XML: capabilities, search results, records, exceptions."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from lxml import etree

from harvest_pipeline.csw.parse import (
    CSWException,
    parse_capabilities,
    parse_get_record_by_id,
    parse_modified,
    parse_search_results,
    to_record,
)
from harvest_pipeline.errors import MalformedXMLError, ProtocolError, XMLSecurityError
from harvest_pipeline.formats import map_record

from .canned import GEONETWORK_CAPS, NS, PYCSW_CAPS, URL, dc_record, exception_report, iso_record, results


def test_pycsw_like_capabilities():
    caps = parse_capabilities(PYCSW_CAPS, URL)
    assert caps.version == "2.0.2" and caps.title == "pycsw Geospatial Catalogue"
    assert set(caps.operations) == {"GetCapabilities", "GetRecords", "GetRecordById"}
    assert caps.operations["GetRecords"].post_urls == ("http://csw.test/csw/post",)
    assert caps.output_schemas == ("http://www.isotc211.org/2005/gmd", "http://www.opengis.net/cat/csw/2.0.2")
    assert caps.type_names == ("csw:Record", "gmd:MD_Metadata")
    assert caps.constraint_languages == ("CQL_TEXT", "FILTER")
    assert caps.result_types == ("hits", "results", "validate")
    assert caps.element_set_names == ("brief", "full", "summary")
    assert caps.max_records == 10  # MaxRecordDefault at OperationsMetadata level
    assert caps.comparison_operators == ("GreaterThanEqualTo", "LessThan")
    assert caps.warnings == ()
    assert caps.offers_output_schema("http://www.opengis.net/cat/csw/2.0.2")
    assert not caps.offers_output_schema("http://www.opengis.net/cat/csw/3.0")
    assert caps.offers_type_name("gmd:MD_Metadata") and caps.offers_type_name("MD_Metadata")


def test_geonetwork_like_capabilities_ows11():
    caps = parse_capabilities(GEONETWORK_CAPS, URL)
    assert caps.type_names == ("gmd:MD_Metadata",)  # "TypeNames", inside AllowedValues
    assert caps.constraint_languages == ("FILTER",)
    assert caps.max_records == 50  # DefaultMaxRecords on the GetRecords operation
    assert not caps.offers_type_name("csw:Record")
    assert caps.result_types == ()  # not advertised: cannot tell


def test_capabilities_without_get_records_say_so():
    doc = PYCSW_CAPS.replace(b'name="GetRecords"', b'name="GetDomain"')
    caps = parse_capabilities(doc, URL)
    assert not caps.supports("GetRecords")
    assert caps.warnings == ("the catalogue does not list a GetRecords operation",)
    assert caps.max_records == 10


def test_exception_report_raises_with_code_locator_text_and_url():
    for ns in ("http://www.opengis.net/ows", "http://www.opengis.net/ows/1.1"):
        with pytest.raises(CSWException) as info:
            parse_search_results(exception_report("InvalidParameterValue", "bad typeNames", "typeNames", ns), URL)
        e = info.value
        assert isinstance(e, ProtocolError)
        assert (e.code, e.locator, e.text, e.url) == ("InvalidParameterValue", "typeNames", "bad typeNames", URL)
        assert "CSW exception InvalidParameterValue (locator typeNames): bad typeNames" in str(e)
        assert URL in str(e)


def test_wrong_document_and_hostile_xml():
    with pytest.raises(ProtocolError, match="expected a CSW GetRecordsResponse document, got <OAI-PMH>"):
        parse_search_results(b'<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/"/>', URL)
    evil = b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "aaaa">]><csw:GetRecordsResponse xmlns:csw="x"/>'
    with pytest.raises(XMLSecurityError):
        parse_search_results(evil, URL)
    with pytest.raises(MalformedXMLError):
        parse_capabilities(b"<csw:Capabilities", URL)


def test_search_results_envelope_and_records():
    body = results([dc_record("a"), dc_record("b")], matched=7, next_record=3)
    env, elements = parse_search_results(body, URL)
    assert (env.matched, env.returned, env.next_record, env.timestamp, env.element_set) == (7, 2, 3, "2026-11-29T00:00:00Z", "full")
    assert [etree.QName(e).localname for e in elements] == ["Record", "Record"]
    env, _ = parse_search_results(results([], matched=0, next_record=None), URL)
    assert env.next_record is None and env.returned == 0


@pytest.mark.parametrize("attrs, message", [
    ('numberOfRecordsReturned="1" nextRecord="0"', "no numberOfRecordsMatched"),
    ('numberOfRecordsMatched="x" numberOfRecordsReturned="1"', "is not an integer"),
    ('numberOfRecordsMatched="-1" numberOfRecordsReturned="1"', "negative"),
    ('numberOfRecordsMatched="5" numberOfRecordsReturned="3"', "carries 1 records"),
])
def test_search_results_that_cannot_be_trusted(attrs, message):
    body = (f'<csw:GetRecordsResponse {NS}><csw:SearchResults {attrs}>{dc_record("a")}'
            "</csw:SearchResults></csw:GetRecordsResponse>").encode()
    with pytest.raises(ProtocolError, match=message):
        parse_search_results(body, URL)


def test_dc_record_becomes_an_oai_record_that_maps():
    _, elements = parse_search_results(results([dc_record("urn:x:1", "2026-11-01T10:00:00Z", "Tëst &amp; more")],
                                               matched=1, next_record=0), URL)
    warnings: list[str] = []
    rec = to_record(elements[0], warnings, 1)
    assert warnings == []
    assert rec.identifier == "urn:x:1" and rec.deleted is False and rec.set_specs == ()
    assert rec.datestamp == "2026-11-01T10:00:00Z"
    assert rec.datestamp_utc == datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
    # standalone: parses on its own, namespaces included
    again = etree.fromstring(rec.metadata_xml.encode())
    assert again.tag == "{http://www.opengis.net/cat/csw/2.0.2}Record"
    mapped = map_record(rec.metadata)
    assert mapped.format_name == "csw_record" and mapped.title == "Tëst & more"
    assert mapped.bbox == (8.5, 47.3, 8.6, 47.4)  # EPSG::4326 URN: latitude first


def test_iso_record_identifier_and_naive_datestamp():
    _, elements = parse_search_results(results([iso_record("iso-1", "2026-11-01T10:00:00")], matched=1, next_record=0), URL)
    rec = to_record(elements[0], [], 1)
    assert rec.identifier == "iso-1"
    assert rec.datestamp == "2026-11-01T10:00:00"  # raw, as the server wrote it
    assert rec.datestamp_utc == datetime(2026, 11, 1, 10, tzinfo=timezone.utc)  # no zone: read as UTC
    assert map_record(rec.metadata).format_name == "iso19139"


def test_records_without_identifier_are_skipped_with_a_warning():
    no_id = "<csw:Record><dc:title>x</dc:title></csw:Record>"
    _, elements = parse_search_results(results([no_id], matched=1, next_record=0), URL)
    warnings: list[str] = []
    assert to_record(elements[0], warnings, 17) is None
    assert warnings == ["record at position 17 (Record) has no identifier; skipped"]


def test_brief_record_without_modified_and_odd_dates():
    _, elements = parse_search_results(results([dc_record("b1", modified="", tag="BriefRecord")], matched=1, next_record=0), URL)
    rec = to_record(elements[0], [], 1)
    assert (rec.identifier, rec.datestamp, rec.datestamp_utc) == ("b1", "", None)
    assert parse_modified("2026-11-01") == datetime(2026, 11, 1, tzinfo=timezone.utc)
    assert parse_modified("2026-11-01T10:00:00.5+01:00") == datetime(2026, 11, 1, 9, 0, 0, 500000, tzinfo=timezone.utc)
    assert parse_modified("2026-11-01T10:00") == datetime(2026, 11, 1, 10, tzinfo=timezone.utc)
    assert parse_modified("last week") is None
    warnings: list[str] = []
    _, elements = parse_search_results(results([dc_record("d1", modified="soon")], matched=1, next_record=0), URL)
    assert to_record(elements[0], warnings, 1).datestamp_utc is None
    assert warnings == ["record d1: unreadable modification date 'soon'"]


def test_get_record_by_id_response():
    body = f'<csw:GetRecordByIdResponse {NS}>{dc_record("a")}{iso_record("b")}</csw:GetRecordByIdResponse>'.encode()
    assert [etree.QName(e).localname for e in parse_get_record_by_id(body, URL)] == ["Record", "MD_Metadata"]
