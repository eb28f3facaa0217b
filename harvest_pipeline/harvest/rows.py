"""Turning one page of records into the columnar rows the staging table stores."""

from __future__ import annotations

import threading
from hashlib import blake2b as _blake2b
from datetime import datetime

import pyarrow as pa

from harvest_pipeline.formats import map_record
from harvest_pipeline.oai.parse import serialize_records
from harvest_pipeline.pages import ListPage
from harvest_pipeline.xmlsafe import parse_xml
from harvest_pipeline.store.columns import NORMALIZED_COLUMNS, PAGE_COLUMNS, PAGE_SCHEMA


def content_hash(metadata_xml: str | None, set_specs: tuple[str, ...], deleted: bool) -> str:
    return _hash_of(metadata_xml.encode("utf-8", "surrogatepass") if metadata_xml else None, set_specs, deleted)


def _hash_of(xml: bytes | None, set_specs: tuple[str, ...], deleted: bool) -> str:
    # blake2b over b"D"/b"L", the set specs joined by \x1f, \x1e, then the metadata's UTF-8 bytes,
    # in one call (the same digest as hashing them piece by piece, as stored hashes were).
    head = (b"D" if deleted else b"L") + "\x1f".join(set_specs).encode() + b"\x1e"
    return _blake2b(head + xml if xml else head, digest_size=16).hexdigest()


# Records turned into Arrow rows at a time: a page near the body cap (tens of thousands of
# records) then holds one chunk's temporary values at once, not the whole page's.
ROWS_CHUNK = 2_000

# One page (or one chunk of a large page) is mapped at a time in a process. The work is Python
# holding the GIL, so threads could not map in parallel anyway; when a batch run's hundred
# sources each mapped their pages at once, they fought over the GIL and every page cost 2-3x
# the CPU (bench/ROUNDS.md, twenty-third round). A thread waiting here waits without the GIL.
_MAPPING = threading.Lock()


def page_rows(
    page: ListPage,
    *,
    metadata_prefix: str,
    window_start: datetime,
    window_end: datetime,
) -> tuple[pa.Table, list[tuple]]:
    """The page as an Arrow table (PAGE_SCHEMA) and its quarantine entries.

    Quarantine entries are (page_number, identifier, kind, error, raw bytes): records the parser
    could not read (kind 'parse', not in the table), records whose metadata no mapper could
    read (kind 'map': stored with their raw XML, normalized fields empty), and records whose
    identifier carried characters XML forbids (kind 'identifier': stored under the repaired
    identifier; `raw` is the identifier as sent).
    """
    # A page listed with serialize=False (harvest/oai_lister.py): its metadata_xml is written below,
    # in the thread that maps it, while the server prepares the next page.
    records = page.records
    page_number = page.page_number
    quarantined = [(page_number, q.identifier, q.kind, q.error, q.raw) for q in page.quarantined]
    quarantined += [
        (page_number, stored, "identifier",
         f"the identifier as sent ({sent!r}) carries characters XML 1.0 forbids; stored as {stored!r} "
         "(control pictures), apart from any identifier without them", sent.encode("utf-8", "surrogatepass"))
        for stored, sent in page.repaired_identifiers
    ]
    ws, we = window_start.replace(tzinfo=None), window_end.replace(tzinfo=None)
    with _MAPPING:
        serialize_records(page)
        if len(records) <= ROWS_CHUNK:
            return _rows(records, 0, page_number, metadata_prefix, ws, we, quarantined), quarantined
    tables = []
    for at in range(0, len(records), ROWS_CHUNK):
        with _MAPPING:  # taken chunk by chunk: other sources' small pages go in between
            tables.append(_rows(records[at:at + ROWS_CHUNK], at, page_number, metadata_prefix, ws, we, quarantined))
    return pa.concat_tables(tables), quarantined


def _rows(records: list, first_seq: int, page_number: int, metadata_prefix: str, ws: datetime, we: datetime,
          quarantined: list) -> pa.Table:
    """Rows of consecutive records of one page (naive UTC window bounds); map errors go to `quarantined`."""
    n = len(records)
    # Column by column, one comprehension each: a page is built in a few passes over its records
    # instead of 28 appends per record.
    datestamps = [r.datestamp_utc.replace(tzinfo=None) if r.datestamp_utc is not None else None for r in records]
    deleted = [r.deleted for r in records]
    # UTF-8 once, for the hash and for Arrow (which would otherwise encode the text again): the
    # parser's own bytes where it kept them.
    live_xml = [None if r.deleted or r.metadata_xml is None
                else r.metadata_utf8 if r.metadata_utf8 is not None
                else r.metadata_xml.encode("utf-8", "surrogatepass")
                for r in records]
    mapped: list = [None] * n
    errors: list = [None] * n
    for i, rec in enumerate(records):
        if rec.deleted:
            continue
        element = rec.metadata
        if element is None and rec.metadata_xml is None:
            continue
        try:
            if element is None:
                # A record of a page parsed as a stream (oai/parse.py, STREAM_PAGE_BYTES) keeps only
                # its serialized metadata: parsed again here, one record's tree at a time.
                element = parse_xml(live_xml[i])
            mapped[i] = map_record(element)
        except Exception as exc:  # a record we cannot map is kept raw, never drops the window
            errors[i] = error = f"{type(exc).__name__}: {exc}"
            quarantined.append((page_number, rec.identifier, "map", error, live_xml[i] or b""))
    cols = {
        "page_number": [page_number] * n,
        "seq": list(range(first_seq, first_seq + n)),
        "identifier": [r.identifier for r in records],
        "datestamp": datestamps,
        "datestamp_raw": [r.datestamp for r in records],
        "deleted": deleted,
        "in_window": [ds is None or ws <= ds < we for ds in datestamps],
        "set_specs": [list(r.set_specs) for r in records],
        "metadata_prefix": [metadata_prefix] * n,
        "metadata_xml": live_xml,
        "content_hash": [_hash_of(x, r.set_specs, r.deleted) for x, r in zip(live_xml, records)],
        "mapping_error": errors,
    }
    for name in NORMALIZED_COLUMNS:
        cols[name] = _normalized_column(name, mapped)
    return pa.table([cols[c] for c in PAGE_COLUMNS], schema=PAGE_SCHEMA)


_BBOX_PART = {"bbox_west": 0, "bbox_south": 1, "bbox_east": 2, "bbox_north": 3}


def _normalized_column(name: str, mapped: list) -> list:
    """One normalized column (a key of NormalizedRecord.to_row()) of the page's mapped records."""
    part = _BBOX_PART.get(name)
    if part is not None:
        return [m.bbox[part] if m is not None and m.bbox else None for m in mapped]
    return [getattr(m, name) if m is not None else None for m in mapped]
