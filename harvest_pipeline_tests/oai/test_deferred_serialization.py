"""A page parsed with serialize=False stores exactly what the serializing parse stores.

The harvest lists its pages with serialize=False (harvest/oai_lister.py): a record's stored
metadata_xml is written by page_rows, after the next page was asked for, instead of in the thread
that fetches and parses. The rows (metadata_xml bytes, content hash, mapped columns) must be
byte-identical to the serializing parse's, or every stored record would look changed to the merge.
"""

from __future__ import annotations

from datetime import datetime, timezone

from harvest_pipeline.harvest.oai_lister import OaiLister
from harvest_pipeline.harvest.rows import page_rows
from harvest_pipeline.oai.client import OAIClient
from harvest_pipeline.oai.parse import parse_list_records, serialize_records

from ..conftest import demo_source
from .canned import dc, list_records, record, token

WINDOW = (datetime(2024, 1, 1, tzinfo=timezone.utc), datetime(2024, 1, 3, tzinfo=timezone.utc))
NS_RECORD = (
    '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
    'xmlns:dc="http://purl.org/dc/elements/1.1/" xmlns:unused="urn:unused">'
    '<dc:title xml:lang="de">Stra\u00dfe &amp; &lt;caf\u00e9&gt;</dc:title><!-- c --><dc:creator>A</dc:creator>'
    "</oai_dc:dc>"
)


def _page_bytes() -> bytes:
    return list_records([
        record("oai:x:1", sets=("a", "b")),
        record("oai:x:2", deleted=True),
        record("oai:x:3", deleted=True, metadata=dc("deleted but carries metadata")),
        record("oai:x:4", metadata=dc("first") + dc("second child")),
        record("oai:x:5", metadata=NS_RECORD),
        record("oai:x:6", metadata='<foo:bar xmlns:foo="urn:unknown"><foo:t>unmappable</foo:t></foo:bar>'),
        *(record(f"oai:x:p{i}", sets=("s",)) for i in range(20)),
    ], token("next", completeListSize="99", cursor="0"))


def _rows(page):
    return page_rows(page, metadata_prefix="oai_dc", window_start=WINDOW[0], window_end=WINDOW[1])


def test_deferred_records_carry_their_elements_and_no_text_until_serialized():
    data = _page_bytes()
    eager = parse_list_records(data, "http://x/oai", {"verb": "ListRecords"}, 1)
    deferred = parse_list_records(data, "http://x/oai", {"verb": "ListRecords"}, 1, serialize=False)
    assert not eager.unserialized and deferred.unserialized
    assert [r.identifier for r in deferred.records] == [r.identifier for r in eager.records]
    live = [r for r in deferred.records if not r.deleted]
    assert live and all(r.metadata_xml is None and r.metadata is not None for r in live)
    serialize_records(deferred)
    assert not deferred.unserialized
    assert [(r.metadata_xml, r.metadata_utf8) for r in deferred.records] == [
        (r.metadata_xml, r.metadata_utf8) for r in eager.records]
    # the text and the bytes the rows store are one serialization (exclusive C14N)
    for r in eager.records:
        assert r.metadata_utf8 == (r.metadata_xml.encode("utf-8") if r.metadata_xml is not None else None)
    assert eager.records[4].metadata_xml.startswith(
        '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/"><dc:title '
        'xmlns:dc="http://purl.org/dc/elements/1.1/" xml:lang="de">Stra\u00dfe &amp; &lt;caf\u00e9&gt;</dc:title>')


def test_rows_of_a_deferred_page_are_byte_identical_to_the_serializing_parse():
    data = _page_bytes()
    eager = parse_list_records(data, "http://x/oai", {"verb": "ListRecords"}, 1)
    # what the rows were before the parser kept its bytes: the text encoded again
    for r in eager.records:
        r.metadata_utf8 = None
    old_table, old_q = _rows(eager)
    deferred = parse_list_records(data, "http://x/oai", {"verb": "ListRecords"}, 1, serialize=False)
    new_table, new_q = _rows(deferred)
    assert new_table.equals(old_table) and new_q == old_q
    assert any(q[2] == "map" for q in new_q)  # the unmappable record is still quarantined raw
    assert new_table.column("title").to_pylist()[4] == "Stra\u00dfe & <caf\u00e9>"


def test_the_harvest_lister_asks_for_deferred_pages(shared_demo, tmp_path):
    """OaiLister (the window's token loop) gets its pages unserialized; page_rows serializes them."""
    lister = OaiLister(demo_source(shared_demo), state_dir=tmp_path)
    page = next(lister.pages(from_param=None, until_param=None, resume_token=None))
    assert page.unserialized and page.records
    assert all(r.metadata_xml is None for r in page.records if not r.deleted)
    table, _ = _rows(page)
    reference = next(OAIClient(shared_demo.url).list_records_pages("oai_dc"))
    assert table.column("metadata_xml").to_pylist() == [
        None if r.deleted else r.metadata_xml for r in reference.records]
