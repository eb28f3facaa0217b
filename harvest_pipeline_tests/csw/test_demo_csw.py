"""The demo provider's /csw endpoint over real HTTP: capabilities, filters, paging, fault modes."""

from __future__ import annotations

import urllib.request
from datetime import timedelta

import pytest
from lxml import etree

from harvest_pipeline.csw import CSW_NS, ISO_SCHEMA, CSWClient, WindowConstraint
from harvest_pipeline.csw.parse import CSWException
from harvest_pipeline.formats import map_record
from harvest_pipeline_tests.conftest import day_window, window_stats

pytestmark = pytest.mark.integration
LIKE_OPTICS = ('<ogc:PropertyIsLike wildCard="%" singleChar="_" escapeChar="\\">'
               "<ogc:PropertyName>dc:subject</ogc:PropertyName><ogc:Literal>optics</ogc:Literal></ogc:PropertyIsLike>")


def csw_url(provider) -> str:
    return provider.base + "/csw"


def window_constraint(window, **kw) -> WindowConstraint:
    return WindowConstraint(window.start, window.end, kw.pop("queryable", "dct:modified"), **kw)


def post(provider, body: bytes) -> bytes:
    req = urllib.request.Request(csw_url(provider), data=body, method="POST", headers={"Content-Type": "application/xml"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return resp.read()


def test_capabilities_advertise_what_a_harvester_needs(shared_demo):
    caps = CSWClient(csw_url(shared_demo)).get_capabilities()
    assert {"GetCapabilities", "GetRecords", "GetRecordById"} <= set(caps.operations)
    assert caps.output_schemas == (CSW_NS, ISO_SCHEMA)
    assert caps.type_names == ("csw:Record", "gmd:MD_Metadata")
    assert caps.constraint_languages == ("FILTER",)
    assert caps.max_records == 1000
    assert caps.operations["GetRecords"].post_urls == (csw_url(shared_demo),)
    assert caps.warnings == ()


def test_hits_equal_the_live_records_of_the_window(shared_demo):
    client = CSWClient(csw_url(shared_demo))
    # Which days hold deletions depends on the date; the corpus always deletes some records.
    deleting = next(d for d in range(1, 8) if window_stats(shared_demo, day_window(d))["deleted"] > 0)
    for days_ago in (2, 5, deleting):
        window = day_window(days_ago)
        stats = window_stats(shared_demo, window)
        assert stats["live"] > 0 and stats["live"] + stats["deleted"] == stats["total"]
        assert client.hits(constraint=window_constraint(window)) == stats["live"]
    assert window_stats(shared_demo, day_window(deleting))["deleted"] > 0  # so deleted ones are left out
    # The whole corpus: deleted records are simply absent.
    assert client.hits() == shared_demo.stats()["live"]


def test_pages_cover_the_window_in_modified_order(shared_demo):
    window = day_window(3)
    client = CSWClient(csw_url(shared_demo))
    pages = list(client.get_records_pages(constraint=window_constraint(window), page_size=20))
    recs = [r for p in pages for r in p.records]
    assert len(recs) == window_stats(shared_demo, window)["live"] == pages[0].resumption.complete_list_size
    stamps = [r.datestamp_utc for r in recs]
    assert stamps == sorted(stamps) and window.start <= stamps[0] and stamps[-1] < window.end
    assert len({r.identifier for r in recs}) == len(recs)
    assert [p.next_token for p in pages][-1] is None and all(p.warnings == [] for p in pages)


def test_window_bounds_are_half_open(shared_demo):
    window = day_window(3)
    client = CSWClient(csw_url(shared_demo))
    first = next(client.get_records(constraint=window_constraint(window), page_size=1))
    at = first.datestamp_utc
    # [at, at + 1 s) holds it; [at - 1 s, at) does not.
    hit = client.hits(constraint=WindowConstraint(at, at + timedelta(seconds=1)))
    miss = client.hits(constraint=WindowConstraint(at - timedelta(seconds=1), at))
    assert hit >= 1 and miss == 0


def test_extra_filter_like_on_subject(shared_demo):
    window = day_window(3)
    client = CSWClient(csw_url(shared_demo))
    narrowed = window_constraint(window, extra_filter=LIKE_OPTICS.replace(">optics<", ">%optics%<"))
    recs = list(client.get_records(constraint=narrowed, page_size=50))
    everything = client.hits(constraint=window_constraint(window))
    assert 0 < len(recs) < everything
    for rec in recs:
        assert any("optics" in s.lower() for s in map_record(rec.metadata).subjects)
    # No wildcard: the whole subject must match (case-insensitively).
    exact = client.hits(constraint=window_constraint(window, extra_filter=LIKE_OPTICS))
    assert 0 < exact <= len(recs)


def test_output_schemas_and_element_sets(shared_demo):
    window = day_window(2)
    client = CSWClient(csw_url(shared_demo))
    dc = next(client.get_records(constraint=window_constraint(window), page_size=1))
    iso = client.get_record_by_id([dc.identifier], output_schema=ISO_SCHEMA)[0]
    assert etree.QName(iso.metadata).localname == "MD_Metadata"
    assert iso.identifier == dc.identifier and iso.datestamp_utc == dc.datestamp_utc
    a, b = map_record(dc.metadata), map_record(iso.metadata)
    assert (a.title, a.bbox, a.description) == (b.title, b.bbox, b.description)
    assert a.format_name == "csw_record" and b.format_name == "iso19139"
    for esn, local in (("brief", "BriefRecord"), ("summary", "SummaryRecord"), ("full", "Record")):
        rec = client.get_record_by_id(dc.identifier, element_set=esn)[0]
        assert etree.QName(rec.metadata).localname == local and rec.identifier == dc.identifier


def test_unsupported_requests_are_exception_reports(shared_demo):
    client = CSWClient(csw_url(shared_demo))
    with pytest.raises(CSWException, match="InvalidParameterValue") as info:
        client.hits(constraint=WindowConstraint(None, None, "dct:modified",
                                                "<ogc:Or><ogc:PropertyIsLike><ogc:PropertyName>dc:title</ogc:PropertyName>"
                                                "<ogc:Literal>x</ogc:Literal></ogc:PropertyIsLike></ogc:Or>"))
    assert "'Or' is not supported" in str(info.value) and info.value.locator == "Constraint"
    with pytest.raises(CSWException, match="outputSchema"):
        client.get_record_by_id("x", output_schema="http://www.opengis.net/cat/csw/3.0")
    # The demo parses posted XML with the hardened parser too.
    out = post(shared_demo, b'<?xml version="1.0"?><!DOCTYPE r [<!ENTITY e "x">]><csw:GetRecords xmlns:csw="x"/>')
    assert b"ExceptionReport" in out and b"NoApplicableCode" in out


def test_silent_cap_and_stuck_next_record_modes(tunable_demo):
    window = day_window(3)
    client = CSWClient(csw_url(tunable_demo))
    live = window_stats(tunable_demo, window)["live"]
    tunable_demo.set_options(csw_max_records_cap=25)
    assert tunable_demo.options()["csw_max_records_cap"] == 25
    first = next(client.get_records_pages(constraint=window_constraint(window), page_size=100))
    assert len(first.records) == 25 and live > 25
    assert "caps the page size" in first.warnings[0]
    tunable_demo.set_options(csw_max_records_cap=0, csw_stuck_next_record=True)
    with pytest.raises(Exception, match="guard 'csw-next-record'"):
        list(client.get_records_pages(constraint=window_constraint(window), page_size=20))


def test_a_record_touched_during_paging_changes_the_match_count(demo):
    window = day_window(3)
    client = CSWClient(csw_url(demo))
    pages = client.get_records_pages(constraint=window_constraint(window), page_size=20)
    first = next(pages)
    matched = first.resumption.complete_list_size
    demo.touch(first.records[0].identifier)  # its new modified date (now) is after the window
    rest = list(pages)
    assert rest[0].warnings[0].startswith(f"numberOfRecordsMatched changed from {matched} to {matched - 1}")
    # Offset paging over a shrinking set: the 21st record slid under the offset and was never
    # sent. The window's completeness check (received vs the first page's count) catches it.
    received = [r.identifier for p in [first, *rest] for r in p.records]
    assert len(received) == len(set(received)) == matched - 1
