"""Turning one page of records into the columnar rows the staging table stores."""

from __future__ import annotations

import hashlib
from datetime import datetime

import pyarrow as pa

from harvest_pipeline.formats import map_record
from harvest_pipeline.pages import ListPage
from harvest_pipeline.store.columns import NORMALIZED_COLUMNS, PAGE_COLUMNS, PAGE_SCHEMA


def content_hash(metadata_xml: str | None, set_specs: tuple[str, ...], deleted: bool) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(b"D" if deleted else b"L")
    h.update("\x1f".join(set_specs).encode())
    h.update(b"\x1e")
    if metadata_xml:
        h.update(metadata_xml.encode("utf-8", "surrogatepass"))
    return h.hexdigest()


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
    cols: dict[str, list] = {c: [] for c in PAGE_COLUMNS}
    quarantined = [(page.page_number, q.identifier, q.kind, q.error, q.raw) for q in page.quarantined]
    quarantined += [
        (page.page_number, stored, "identifier",
         f"the identifier as sent ({sent!r}) carries characters XML 1.0 forbids; stored as {stored!r} "
         "(control pictures), apart from any identifier without them", sent.encode("utf-8", "surrogatepass"))
        for stored, sent in page.repaired_identifiers
    ]
    ws, we = window_start.replace(tzinfo=None), window_end.replace(tzinfo=None)
    for seq, rec in enumerate(page.records):
        ds = rec.datestamp_utc.replace(tzinfo=None) if rec.datestamp_utc else None
        cols["page_number"].append(page.page_number)
        cols["seq"].append(seq)
        cols["identifier"].append(rec.identifier)
        cols["datestamp"].append(ds)
        cols["datestamp_raw"].append(rec.datestamp)
        cols["deleted"].append(rec.deleted)
        cols["in_window"].append(ds is None or ws <= ds < we)
        cols["set_specs"].append(list(rec.set_specs))
        cols["metadata_prefix"].append(metadata_prefix)
        cols["metadata_xml"].append(None if rec.deleted else rec.metadata_xml)
        cols["content_hash"].append(content_hash(None if rec.deleted else rec.metadata_xml, rec.set_specs, rec.deleted))
        normalized: dict = {}
        error = None
        if not rec.deleted and rec.metadata is not None:
            try:
                normalized = map_record(rec.metadata).to_row()
            except Exception as exc:  # a record we cannot map is kept raw, never drops the window
                error = f"{type(exc).__name__}: {exc}"
                quarantined.append((page.page_number, rec.identifier, "map", error, (rec.metadata_xml or "").encode()))
        for c in NORMALIZED_COLUMNS:
            cols[c].append(normalized.get(c))
        cols["mapping_error"].append(error)
    return pa.table(cols, schema=PAGE_SCHEMA), quarantined
