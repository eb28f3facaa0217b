"""What a remap reads: a source's live records with their raw XML and their mapped columns, part by part.

The parts split the source by `identifier_key` (63 bits of the identifier's md5, spread evenly), so
each holds about `per_part` records whatever the source's size, and no part is read twice.
"""

from __future__ import annotations

import duckdb

from harvest_pipeline.store.columns import NORMALIZED_COLUMNS

# The stored columns a remap compares with a fresh mapping (and which a mapping rewrites).
MAPPED_COLUMNS: tuple[str, ...] = (*NORMALIZED_COLUMNS, "mapping_error")
# Before them, what rebuilds the record as received: its header and its raw XML.
VERSION_COLUMNS: tuple[str, ...] = ("identifier", "datestamp", "datestamp_raw", "set_specs", "metadata_prefix",
                                   "metadata_xml")
_KEY_MAX = (1 << 63) - 1  # identifier_key is never negative


def live_record_count(con: duckdb.DuckDBPyConnection, source_id: str) -> int:
    return con.execute(
        "SELECT count(*) FROM records WHERE source_id = ? AND NOT deleted AND metadata_xml IS NOT NULL", [source_id]
    ).fetchone()[0]


def remap_parts(con: duckdb.DuckDBPyConnection, source_id: str, *, per_part: int = 2_000) -> list[tuple[int, int, bool]]:
    """The source's parts as (lowest key, highest key, with the rows that have no key yet)."""
    parts = max(1, -(-live_record_count(con, source_id) // per_part))
    step = _KEY_MAX // parts + 1
    return [(part * step, min((part + 1) * step - 1, _KEY_MAX), part == 0) for part in range(parts)]


def live_versions_in(con: duckdb.DuckDBPyConnection, source_id: str, part: tuple[int, int, bool]) -> list[tuple]:
    """The part's live records as rows of VERSION_COLUMNS then MAPPED_COLUMNS, by identifier.

    A row whose key is not filled in yet (a shared catalogue's rows written before the key
    existed) is read with the first part.
    """
    columns = ", ".join(VERSION_COLUMNS + MAPPED_COLUMNS)
    return con.execute(
        f"SELECT {columns} FROM records WHERE source_id = ? AND NOT deleted AND metadata_xml IS NOT NULL "
        "AND (identifier_key BETWEEN ? AND ? OR (identifier_key IS NULL AND ?)) ORDER BY identifier",
        [source_id, *part],
    ).fetchall()
