"""Repairing almost-XML and salvaging the good records of a broken ListRecords page."""

from __future__ import annotations

import codecs
import threading

from harvest_pipeline.oai import parse_list_records
from harvest_pipeline.xmlrepair import repair, split_records

from .oai.canned import envelope, header, token

MARC = "http://www.loc.gov/MARC21/slim"


def marc_prefixed(title: str) -> str:
    return (f'<marc:collection xmlns:marc="{MARC}"><marc:record><marc:leader>00000nam</marc:leader>'
            f'<marc:datafield tag="245" ind1="0" ind2="0"><marc:subfield code="a">{title}</marc:subfield>'
            "</marc:datafield></marc:record></marc:collection>")


def marc_default(title: str) -> str:
    return (f'<record xmlns="{MARC}"><leader>00000nam</leader><datafield tag="245" ind1="0" ind2="0">'
            f'<subfield code="a">{title}</subfield></datafield></record>')


def marc_page(*records: str) -> bytes:
    return envelope(f"<ListRecords>{''.join(records)}{token('t1', completeListSize='4')}</ListRecords>",
                    verb="ListRecords", request_attrs='metadataPrefix="marc21"')


def rec(identifier: str, metadata: str) -> str:
    return f"<record>{header(identifier)}<metadata>{metadata}</metadata></record>"


def test_a_broken_marcxml_record_is_quarantined_and_its_neighbours_kept():
    broken = marc_default("Broken <b>title")  # an element left open: the record is not well-formed
    content = marc_page(rec("oai:x:1", marc_prefixed("One")), rec("oai:x:2", marc_default("Two")),
                        rec("oai:x:3", broken), rec("oai:x:4", marc_default("Four")))
    page = parse_list_records(content, "http://x/oai")
    assert [r.identifier for r in page.records] == ["oai:x:1", "oai:x:2", "oai:x:4"]
    assert [q.identifier for q in page.quarantined] == ["oai:x:3"]
    assert page.next_token == "t1" and page.resumption.complete_list_size == 4
    # each kept record is whole, its MARC record inside it
    assert "One" in page.records[0].metadata_xml and "Four" in page.records[2].metadata_xml
    assert page.records[1].metadata.tag == f"{{{MARC}}}record"
    assert b"Broken" in page.quarantined[0].raw and page.quarantined[0].raw.endswith(b"</record>")


def test_split_takes_only_the_verbs_records_not_marcs():
    content = marc_page(rec("oai:x:1", marc_default("One")), rec("oai:x:2", marc_prefixed("Two")))
    envelope_bytes, chunks, decls = split_records(content)
    assert [c.identifier for c in chunks] == ["oai:x:1", "oai:x:2"]
    assert all(c.raw.startswith(b"<record><header>") and c.raw.endswith(b"</metadata></record>") for c in chunks)
    assert b"<record" not in envelope_bytes and b"resumptionToken" in envelope_bytes
    assert b'xmlns="http://www.openarchives.org/OAI/2.0/"' in decls


def test_repair_counts_each_call_without_registering_a_codec_handler_per_call(monkeypatch):
    registered = []
    monkeypatch.setattr(codecs, "register_error", lambda *a: registered.append(a))
    results = {}

    def run(n: int) -> None:
        for _ in range(50):
            body, repairs = repair(b'<?xml version="1.0" encoding="utf-8"?><a>' + b"\xff" * n + b"\x0b</a>")
            results.setdefault(n, set()).add((repairs.invalid_bytes, repairs.control_chars))

    threads = [threading.Thread(target=run, args=(n,)) for n in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registered == []
    assert results == {1: {(1, 1)}, 2: {(2, 1)}, 3: {(3, 1)}}
