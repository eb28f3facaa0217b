"""CSWClient against canned responses: what is sent, how paging follows nextRecord, the guards."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from lxml import etree

from harvest_pipeline.csw import CSW_NS, WindowConstraint
from harvest_pipeline.csw.parse import CSWException
from harvest_pipeline.errors import HTTPStatusError, ProtocolError

from .canned import PYCSW_CAPS, URL, dc_record, exception_report, make_client, page_of, results

START = datetime(2026, 11, 1, tzinfo=timezone.utc)
WINDOW = WindowConstraint(START, START + timedelta(days=1), "dct:modified")
OGC = "{http://www.opengis.net/ogc}"


def sent(adapter, i: int):
    req = adapter.requests[i]
    assert req.method == "POST" and req.url == URL
    assert req.headers["Content-Type"] == "application/xml; charset=UTF-8"
    return etree.fromstring(req.body)


def positions(adapter) -> list[tuple[str, str]]:
    return [(sent(adapter, i).get("startPosition"), sent(adapter, i).get("maxRecords")) for i in range(len(adapter.requests))]


def ids(pages) -> list[str]:
    return [r.identifier for p in pages for r in p.records]


def test_pages_follow_next_record_and_carry_the_first_matched():
    client, adapter = make_client([
        page_of(1, 2, matched=5, next_record=3),
        page_of(3, 2, matched=5, next_record=5),
        page_of(5, 1, matched=5, next_record=0),
    ])
    pages = list(client.get_records_pages(constraint=WINDOW, page_size=2))
    assert ids(pages) == ["r1", "r2", "r3", "r4", "r5"]
    assert [p.next_token for p in pages] == ["3", "5", None]
    assert [p.resumption.cursor for p in pages] == [0, 2, 4]
    assert {p.resumption.complete_list_size for p in pages} == {5}
    assert [p.page_number for p in pages] == [1, 2, 3]
    assert all(p.warnings == [] for p in pages)
    assert pages[0].params["startPosition"] == "1" and pages[0].params["from"] == "2026-11-01T00:00:00Z"
    assert positions(adapter) == [("1", "2"), ("3", "2"), ("5", "2")]
    # Every page repeats the whole query: window filter, SortBy on the modified queryable.
    for i in range(3):
        root = sent(adapter, i)
        assert [el.text for el in root.iter(f"{OGC}Literal")] == ["2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z"]
        assert root.findtext(f".//{OGC}SortProperty/{OGC}PropertyName") == "dct:modified"
        assert root.get("resultType") == "results"


def test_lazy_and_resumes_from_a_start_position():
    client, adapter = make_client([page_of(41, 2, matched=42, next_record=0)])
    pages = client.get_records_pages(constraint=WINDOW, page_size=20, start_position=41)
    assert adapter.requests == []  # nothing fetched until iterated
    pages = list(pages)
    assert positions(adapter) == [("41", "20")]
    assert pages[0].resumption.cursor == 40 and pages[0].next_token is None


def test_next_record_past_matched_ends_the_list():
    client, _ = make_client([page_of(1, 2, matched=2, next_record=3)])
    assert [p.next_token for p in client.get_records_pages(page_size=2)] == [None]


def test_empty_window():
    client, _ = make_client([results([], matched=0, next_record=0)])
    pages = list(client.get_records_pages(constraint=WINDOW))
    assert len(pages) == 1 and pages[0].empty_list and pages[0].records == []
    assert pages[0].resumption.complete_list_size == 0 and pages[0].next_token is None


def test_silent_cap_with_an_honest_next_record_is_noted_once():
    client, adapter = make_client([
        page_of(1, 2, matched=5, next_record=3),
        page_of(3, 2, matched=5, next_record=5),
        page_of(5, 1, matched=5, next_record=0),
    ])
    pages = list(client.get_records_pages(page_size=100))
    assert ids(pages) == [f"r{i}" for i in range(1, 6)]
    assert pages[0].warnings == ["the server returned 2 records for maxRecords=100: it caps the page size"]
    assert pages[1].warnings == pages[2].warnings == []
    assert positions(adapter) == [("1", "100"), ("3", "100"), ("5", "100")]


def test_silent_cap_whose_next_record_would_skip_pages_by_what_was_returned():
    # Asked 100, got 25, told nextRecord=101 (as if 100 had been sent): following it skips 75.
    client, adapter = make_client([
        page_of(1, 25, matched=60, next_record=0),  # 1 + 100 > 60: "the end", after 25 of 60
        page_of(26, 25, matched=60, next_record=0),
        page_of(51, 10, matched=60, next_record=0),
    ])
    pages = list(client.get_records_pages(page_size=100))
    assert ids(pages) == [f"r{i}" for i in range(1, 61)]
    assert [p.next_token for p in pages] == ["26", "51", None]
    assert "caps the page size" in pages[0].warnings[0] and pages[1].warnings == []
    assert positions(adapter) == [("1", "100"), ("26", "100"), ("51", "100")]

    client, adapter = make_client([
        page_of(1, 25, matched=300, next_record=101),
        page_of(26, 25, matched=300, next_record=126),
    ])
    pages = client.get_records_pages(page_size=100)
    first = next(pages)
    assert first.next_token == "26"
    assert first.warnings == ["the server returned 25 records for maxRecords=100 but answered nextRecord=101, "
                              "which would skip 75: it caps the page size; paging by what it returned"]
    assert next(pages).next_token == "51"


def test_missing_next_record_pages_by_what_was_returned():
    client, _ = make_client([page_of(1, 3, matched=5, next_record=None), page_of(4, 2, matched=5, next_record=None)])
    pages = list(client.get_records_pages(page_size=3))
    assert [p.next_token for p in pages] == ["4", None] and len(ids(pages)) == 5


def test_next_record_that_does_not_advance_trips_the_guard():
    client, _ = make_client([page_of(1, 2, matched=5, next_record=1)])
    with pytest.raises(ProtocolError, match=r"guard 'csw-next-record': nextRecord=1 does not advance past startPosition=1") as info:
        list(client.get_records_pages(page_size=2))
    assert info.value.url == URL


def test_next_record_going_backwards_trips_the_guard():
    client, _ = make_client([page_of(1, 2, matched=9, next_record=3), page_of(3, 2, matched=9, next_record=2)])
    pages = client.get_records_pages(page_size=2)
    assert next(pages).next_token == "3"
    with pytest.raises(ProtocolError, match="guard 'csw-next-record': nextRecord=2 does not advance past startPosition=3"):
        next(pages)


def test_advancing_with_no_records_trips_the_guard():
    client, _ = make_client([results([], matched=9, next_record=5)])
    with pytest.raises(ProtocolError, match="guard 'csw-next-record': no records returned at startPosition=1 but nextRecord=5"):
        list(client.get_records_pages(page_size=10))


def test_a_changing_match_count_is_a_page_warning():
    client, _ = make_client([
        page_of(1, 2, matched=5, next_record=3),
        page_of(3, 2, matched=4, next_record=0),
    ])
    pages = list(client.get_records_pages(page_size=2))
    assert pages[1].warnings == [
        "numberOfRecordsMatched changed from 5 to 4 at startPosition 3: records were added, changed or removed while paging"]
    assert pages[1].resumption.complete_list_size == 5  # the first page's promise stays the target


def test_exception_report_in_a_200_is_a_protocol_error():
    client, _ = make_client([exception_report("InvalidParameterValue", "cannot sort by dct:modified", "SortBy")])
    with pytest.raises(CSWException, match="InvalidParameterValue") as info:
        list(client.get_records_pages(constraint=WINDOW))
    assert info.value.url == URL and info.value.locator == "SortBy"


def test_http_errors_name_the_status():
    client, _ = make_client([(404, b"not here")])
    with pytest.raises(HTTPStatusError, match="HTTP 404") as info:
        client.get_capabilities()
    assert info.value.status_code == 404


def test_capabilities_request_is_kvp_get():
    client, adapter = make_client([PYCSW_CAPS])
    caps = client.get_capabilities()
    assert caps.max_records == 10
    assert adapter.query(0) == [("service", "CSW"), ("request", "GetCapabilities"), ("acceptVersions", "2.0.2")]
    assert adapter.requests[0].method == "GET"


def test_get_record_by_id_is_kvp_get_and_skips_unknown():
    body = results([dc_record("a")], matched=1, next_record=0).replace(b"GetRecordsResponse", b"GetRecordByIdResponse")
    client, adapter = make_client([body])
    recs = client.get_record_by_id(["a", "missing"], output_schema=CSW_NS)
    assert [r.identifier for r in recs] == ["a"]
    assert dict(adapter.query(0)) == {
        "service": "CSW", "version": "2.0.2", "request": "GetRecordById", "id": "a,missing",
        "outputSchema": CSW_NS, "elementSetName": "full"}
    assert client.get_record_by_id([]) == []


def test_list_identifiers_is_brief_sorted_by_identifier_and_strict():
    client, adapter = make_client([page_of(1, 2, matched=3, next_record=3), page_of(3, 1, matched=3, next_record=0)])
    assert list(client.list_identifiers(page_size=2)) == ["r1", "r2", "r3"]
    root = sent(adapter, 0)
    assert root.findtext("{http://www.opengis.net/cat/csw/2.0.2}Query/{http://www.opengis.net/cat/csw/2.0.2}ElementSetName") == "brief"
    assert root.findtext(f".//{OGC}SortProperty/{OGC}PropertyName") == "dc:identifier"
    assert root.find(f".//{OGC}Filter") is None

    client, _ = make_client([page_of(1, 2, matched=3, next_record=3), page_of(3, 1, matched=2, next_record=0)])
    with pytest.raises(ProtocolError, match="guard 'csw-matched-changed': numberOfRecordsMatched changed from 3 to 2"):
        list(client.list_identifiers(page_size=2))
    client, _ = make_client([page_of(1, 2, matched=3, next_record=3), page_of(3, 1, matched=2, next_record=0)])
    assert len(list(client.list_identifiers(page_size=2, strict=False))) == 3


def test_iso_identifiers_sort_by_apiso_identifier():
    client, adapter = make_client([results([], matched=0, next_record=0)])
    assert list(client.list_identifiers(type_names="gmd:MD_Metadata", output_schema="http://www.isotc211.org/2005/gmd")) == []
    assert sent(adapter, 0).findtext(f".//{OGC}SortProperty/{OGC}PropertyName") == "apiso:Identifier"


def test_earliest_modified_is_verified_by_a_hits_count():
    first = results([dc_record("r1", "2026-10-01T08:00:00Z")], matched=50, next_record=2)
    client, adapter = make_client([first, results([], matched=0, next_record=0)])
    assert client.earliest_modified() == datetime(2026, 10, 1, 8, tzinfo=timezone.utc)
    probe, check = sent(adapter, 0), sent(adapter, 1)
    assert probe.get("maxRecords") == "1" and probe.findtext(f".//{OGC}SortOrder") == "ASC"
    assert check.get("resultType") == "hits"
    assert [el.text for el in check.iter(f"{OGC}Literal")] == ["2026-10-01T08:00:00Z"]
    assert check.find(f".//{OGC}PropertyIsLessThan") is not None
    # A catalogue that ignored SortBy: older records exist, so no answer rather than a wrong one.
    client, _ = make_client([first, results([], matched=3, next_record=0)])
    assert client.earliest_modified() is None


def test_credentials_in_the_url_move_to_auth():
    client, adapter = make_client([PYCSW_CAPS], url="http://user:secret@csw.test/csw")
    assert client.url == URL and client.auth == ("user", "secret")
    client.get_capabilities()
    assert "secret" not in adapter.requests[0].url
