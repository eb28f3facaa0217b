"""Pages near the body cap are parsed as a stream, with the same result as the whole-tree path."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

import harvest_pipeline.harvest.rows as rows
import harvest_pipeline.oai.parse as parse
from harvest_pipeline.errors import ProtocolError
from harvest_pipeline.harvest.rows import page_rows

from .canned import dc, envelope, error, list_records, record, token

WINDOW = (datetime(2024, 1, 1, tzinfo=timezone.utc), datetime(2024, 1, 3, tzinfo=timezone.utc))


def _odd_page(tok: str) -> bytes:
    """Records the parser has something to say about, around ordinary ones."""
    odd = [
        record("oai:x:1", sets=("a", "b")),
        record("oai:x:2", deleted=True),
        record("oai:x:3", deleted=True, metadata=dc("deleted but carries metadata")),
        record("oai:x:4", metadata=dc("first") + dc("second child")),
        "<record><header><datestamp>2024-01-02T00:00:00Z</datestamp></header></record>",  # no identifier
        record("oai:x:5", datestamp="not a date"),
        record("oai:x:6", metadata='<foo:bar xmlns:foo="urn:unknown"><foo:t>unmappable</foo:t></foo:bar>'),
        record("oai:x:7", metadata=dc("Stra\u00dfe &amp; Nguy\u1ec5n <!-- a comment --> caf\u00e9")),
        "<record><metadata>" + dc("no header") + "</metadata></record>",
    ]
    plain = [record(f"oai:x:p{i}", sets=("s",)) for i in range(40)]
    return list_records(odd + plain, tok)


def _parsed(data: bytes, monkeypatch, *, streamed: bool):
    monkeypatch.setattr(parse, "STREAM_PAGE_BYTES", 0 if streamed else 1 << 40)
    page = parse.parse_list_records(data, "http://x/oai", {"verb": "ListRecords"}, 3)
    table, quarantined = page_rows(page, metadata_prefix="oai_dc", window_start=WINDOW[0], window_end=WINDOW[1])
    return page, table, quarantined


def _what(page):
    return (page.response_date, page.resumption, page.warnings, page.byte_size, page.repaired,
            [(r.identifier, r.datestamp, r.datestamp_utc, r.set_specs, r.deleted, r.metadata_xml) for r in page.records])


@pytest.mark.parametrize("tok", [token("next", completeListSize="99", cursor="0"), token(None), ""])
def test_a_streamed_page_reads_exactly_what_the_whole_tree_reads(monkeypatch, tok):
    data = _odd_page(tok)
    tree_page, tree_table, tree_q = _parsed(data, monkeypatch, streamed=False)
    stream_page, stream_table, stream_q = _parsed(data, monkeypatch, streamed=True)
    assert _what(stream_page) == _what(tree_page)
    assert stream_table.equals(tree_table) and stream_q == tree_q
    assert len(tree_page.records) == 47 and any(q[2] == "map" for q in tree_q)
    # the streamed records keep no tree: their mapper parsed metadata_xml again
    assert all(r.metadata is None for r in stream_page.records)
    assert stream_table.column("title").to_pylist()[6] == "Stra\u00dfe & Nguy\u1ec5n caf\u00e9"


def test_a_streamed_page_that_does_not_parse_is_salvaged_like_any_other(monkeypatch):
    good = [record(f"oai:x:{i}") for i in range(5)]
    broken = "<record>" + "<header><identifier>oai:x:bad</identifier><datestamp>2024-01-02T00:00:00Z</datestamp></header><metadata><oops></metadata></record>"
    data = list_records(good[:2] + [broken] + good[2:], token("next"))
    tree_page, tree_table, tree_q = _parsed(data, monkeypatch, streamed=False)
    stream_page, stream_table, stream_q = _parsed(data, monkeypatch, streamed=True)
    assert [q.identifier for q in stream_page.quarantined] == [q.identifier for q in tree_page.quarantined] == ["oai:x:bad"]
    assert _what(stream_page) == _what(tree_page) and stream_table.equals(tree_table)
    assert stream_page.next_token == "next"


def test_a_streamed_error_response_raises_as_usual(monkeypatch):
    monkeypatch.setattr(parse, "STREAM_PAGE_BYTES", 0)
    with pytest.raises(ProtocolError):
        parse.parse_list_records(envelope("<Identify/>", verb="Identify"), "http://x/oai")
    page = parse.parse_list_records(error("noRecordsMatch"), "http://x/oai", empty_on_no_records_match=True)
    assert page.empty_list and page.records == []


def test_rows_built_in_chunks_equal_rows_built_at_once(monkeypatch):
    data = _odd_page(token("next"))
    _, whole, whole_q = _parsed(data, monkeypatch, streamed=False)
    monkeypatch.setattr(rows, "ROWS_CHUNK", 7)
    _, chunked, chunked_q = _parsed(data, monkeypatch, streamed=False)
    assert chunked.equals(whole) and chunked_q == whole_q
    assert chunked.column("seq").to_pylist() == list(range(47))
