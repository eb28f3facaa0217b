"""Turning one page of records into the columnar rows the staging table stores."""

from __future__ import annotations

from hashlib import blake2b as _blake2b
from datetime import datetime

import pyarrow as pa

from harvest_pipeline.formats import map_record
from harvest_pipeline.pages import ListPage
from harvest_pipeline.store.columns import NORMALIZED_COLUMNS, PAGE_COLUMNS, PAGE_SCHEMA


def content_hash(metadata_xml: str | None, set_specs: tuple[str, ...], deleted: bool) -> str:
    # blake2b over b"D"/b"L", the set specs joined by \x1f, \x1e, then the metadata's UTF-8 bytes,
    # in one call (the same digest as hashing them piece by piece, as stored hashes were).
    head = (b"D" if deleted else b"L") + "\x1f".join(set_specs).encode() + b"\x1e"
    if metadata_xml:
        head += metadata_xml.encode("utf-8", "surrogatepass")
    return _blake2b(head, digest_size=16).hexdigest()


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
    records = page.records
    n = len(records)
    page_number = page.page_number
    quarantined = [(page_number, q.identifier, q.kind, q.error, q.raw) for q in page.quarantined]
    quarantined += [
        (page_number, stored, "identifier",
         f"the identifier as sent ({sent!r}) carries characters XML 1.0 forbids; stored as {stored!r} "
         "(control pictures), apart from any identifier without them", sent.encode("utf-8", "surrogatepass"))
        for stored, sent in page.repaired_identifiers
    ]
    ws, we = window_start.replace(tzinfo=None), window_end.replace(tzinfo=None)
    # Column by column, one comprehension each: a page is built in a few passes over its records
    # instead of 28 appends per record.
    datestamps = [r.datestamp_utc.replace(tzinfo=None) if r.datestamp_utc is not None else None for r in records]
    deleted = [r.deleted for r in records]
    live_xml = [None if r.deleted else r.metadata_xml for r in records]
    mapped: list = [None] * n
    errors: list = [None] * n
    for i, rec in enumerate(records):
        if not rec.deleted and rec.metadata is not None:
            try:
                mapped[i] = map_record(rec.metadata)
            except Exception as exc:  # a record we cannot map is kept raw, never drops the window
                errors[i] = error = f"{type(exc).__name__}: {exc}"
                quarantined.append((page_number, rec.identifier, "map", error, (rec.metadata_xml or "").encode()))
    cols = {
        "page_number": [page_number] * n,
        "seq": list(range(n)),
        "identifier": [r.identifier for r in records],
        "datestamp": datestamps,
        "datestamp_raw": [r.datestamp for r in records],
        "deleted": deleted,
        "in_window": [ds is None or ws <= ds < we for ds in datestamps],
        "set_specs": [list(r.set_specs) for r in records],
        "metadata_prefix": [metadata_prefix] * n,
        "metadata_xml": live_xml,
        "content_hash": [content_hash(x, r.set_specs, r.deleted) for x, r in zip(live_xml, records)],
        "mapping_error": errors,
    }
    for name in NORMALIZED_COLUMNS:
        cols[name] = _normalized_column(name, mapped)
    return pa.table([cols[c] for c in PAGE_COLUMNS], schema=PAGE_SCHEMA), quarantined


_BBOX_PART = {"bbox_west": 0, "bbox_south": 1, "bbox_east": 2, "bbox_north": 3}


def _normalized_column(name: str, mapped: list) -> list:
    """One normalized column (a key of NormalizedRecord.to_row()) of the page's mapped records."""
    part = _BBOX_PART.get(name)
    if part is not None:
        return [m.bbox[part] if m is not None and m.bbox else None for m in mapped]
    return [getattr(m, name) if m is not None else None for m in mapped]
