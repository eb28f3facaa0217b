"""Merging several small staged windows of different sources in one set of statements.

A small window's merge (`merge.merge_staging`) is mostly the fixed cost of its twenty-odd
statements: with a hundred sources harvested at once their merges queued for the CPU and held
back the next windows. `merge_staged_windows` merges a group of windows in the caller's
transaction. The windows whose received records have no row in `records` (a catch-up's: every
record new) go through one set of statements for the whole group; the others (a stored row found,
quarantined records, a large window) are merged one by one by `merge_staging`, in the same
transaction. Both give the same rows, history and counts (tested side by side).

Into the embedded file and into PostgreSQL (there the group's stored keys and history are looked
up by PostgreSQL itself, on its indexes, as a single merge's are); a DuckLake catalogue merges
each window alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import duckdb

from harvest_pipeline.store.backend import EMBEDDED, POSTGRES, dialect, pg_array
from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.columns import identifier_key_sql
from harvest_pipeline.store.merge import (
    ACTION_WITHOUT_ROW, ACTIONS, DUPLICATE_EXAMPLES, INSERTED_COLUMNS, LARGE_WINDOW_ROWS, LAST_STORED_VERSION,
    PREVIEW_COLUMNS, PREVIEW_ORDER, PREVIEW_ROWS, STORING, MergeCounts, give_rows_their_keys, history_values,
    inserted_values, merge_staging, pg_rows_for, received_position, small_list, sql_list,
)
from harvest_pipeline.store import row_tally
from harvest_pipeline.store.staging import staged_file_lists, staged_files


@dataclass(frozen=True)
class StagedWindow:
    """A traversed window waiting for its merge: its staging folder and what its rows record."""

    staging_folder: Path
    source_id: str
    window_start: datetime
    window_end: datetime
    run_id: str
    attempt_id: str
    received: int  # staged rows (the cursor's count): a large window is merged alone

    def merge_alone(self, con: duckdb.DuckDBPyConnection) -> MergeCounts:
        return merge_staging(con, self.staging_folder, source_id=self.source_id, window_start=self.window_start,
                             window_end=self.window_end, run_id=self.run_id, attempt_id=self.attempt_id)


# The group's staged rows: every window's committed Parquet files, each row with its window's
# number `w` (the files of the connection's variable, numbered by `g_files`). Read once into the
# temp table `g_pages`, which the statements below read: each read of the files opened every one
# of them again (a group of 19 windows of the 100-source bench has about 60), five times a merge.
_READ_PAGES = """SELECT f.w, p.* EXCLUDE (filename)
                 FROM read_parquet(getvariable('stg_group_files'), filename = true) p
                 JOIN g_files f ON f.filename = p.filename"""
_PAGES = "g_pages"


def merge_staged_windows(con: duckdb.DuckDBPyConnection, windows: list[StagedWindow]) -> list[MergeCounts]:
    """Merge `windows` (each of a different source) in the caller's transaction; their counts, in order."""
    if len({w.source_id for w in windows}) != len(windows):
        raise ValueError("a merge group holds one window per source")
    counts: dict[int, MergeCounts] = {}
    grouped: dict[int, list[str]] = {}
    kind = dialect(con)
    if kind in (EMBEDDED, POSTGRES):
        for n, window in enumerate(windows):
            # The committed files themselves: a window without quarantine files needs no empty one.
            rows, quarantine = staged_files(window.staging_folder)
            if window.received <= LARGE_WINDOW_ROWS and not quarantine:
                grouped[n] = [str(f) for f, _, _ in rows] or staged_file_lists(window.staging_folder)[0]
    if len(grouped) > 1:
        counts.update(_merge_new_records(con, windows, grouped, kind))
    for n, window in enumerate(windows):
        if n not in counts:
            counts[n] = window.merge_alone(con)
    return [counts[n] for n in range(len(windows))]


def _merge_new_records(con, windows: list[StagedWindow], grouped: dict[int, list[str]], kind: str) -> dict[int, MergeCounts]:
    """Merge the windows of `grouped` (number -> staged row files) whose records all lack a row in
    `records`; return their counts (the others are left to the caller)."""
    now = utcnow()
    numbers = sorted(grouped)
    files = [(f, n) for n in numbers for f in grouped[n]]
    con.execute("SET VARIABLE stg_group_files = ?", [[f for f, _ in files]])
    con.execute("CREATE OR REPLACE TEMP TABLE g_files AS SELECT unnest(?::VARCHAR[]) AS filename, unnest(?::INTEGER[]) AS w",
                [[f for f, _ in files], [n for _, n in files]])
    # One row per window, its values as the single merge passes them (parameters of the same types).
    rows_sql = ", ".join("(?::INTEGER, ?::VARCHAR, ?::TIMESTAMP, ?::TIMESTAMP, ?::VARCHAR, ?::VARCHAR)" for _ in numbers)
    params = [v for n in numbers for v in (n, windows[n].source_id, windows[n].window_start, windows[n].window_end,
                                           windows[n].run_id, windows[n].attempt_id)]
    con.execute("CREATE OR REPLACE TEMP TABLE g_windows (w INTEGER, source_id VARCHAR, window_start TIMESTAMP, "
                "window_end TIMESTAMP, run_id VARCHAR, attempt_id VARCHAR)")
    con.execute(f"INSERT INTO g_windows VALUES {rows_sql}", params)
    con.execute(f"CREATE OR REPLACE TEMP TABLE g_pages AS {_READ_PAGES}")
    # The group's temp tables (at most LARGE_WINDOW_ROWS rows) are not dropped, after an error or
    # after the merge: the cursor is closed after the transaction, and the next group on it
    # replaces them (in a busy process each statement waits for Python's GIL a few times;
    # bench/ROUNDS.md).
    return _merge_grouped(con, now, kind)


def _pg_pairs(con, column: str, pg_type: str, query_for) -> str:
    """A FROM item: what PostgreSQL returns for `query_for(pairs)`, where `pairs` is a FROM item
    `k(source_id, <column>)` of the group's (source, received `column`) pairs, chunk by chunk (a
    join on its index; DuckDB would push an IN list as its range and copy the sources' rows)."""
    rows = con.execute(f"SELECT DISTINCT g.source_id, l.{column} FROM g_latest l JOIN g_windows g ON g.w = l.w").fetchall()
    return pg_rows_for(rows, lambda chunk: query_for(
        f"unnest({pg_array([r[0] for r in chunk], 'text')}, {pg_array([r[1] for r in chunk], pg_type)})"
        f" AS k(source_id, {column})"))


def _merge_grouped(con, now: datetime, kind: str) -> dict[int, MergeCounts]:
    # A record listed twice in one traversal counts once, in its last-received version (as alone).
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE g_latest AS
        SELECT w, identifier, max({received_position()}) AS pos,
               {identifier_key_sql('identifier')} AS identifier_key, count(*) AS listed
        FROM {_PAGES} GROUP BY w, identifier
        """
    )
    give_rows_their_keys(con, kind)
    # A window with any received key stored for its source (its record, or one sharing its key)
    # goes to the single merge, which compares versions and checks identifiers.
    if kind == POSTGRES:
        stored_keys = _pg_pairs(con, "identifier_key", "bigint", lambda pairs: (
            f"SELECT r.source_id, r.identifier_key FROM records r JOIN {pairs}"
            " ON r.source_id = k.source_id AND r.identifier_key = k.identifier_key"))
    else:
        keys = small_list(con, "SELECT DISTINCT identifier_key FROM g_latest")
        window_keys = "(SELECT identifier_key FROM g_latest)" if keys is None else sql_list(keys)
        stored_keys = f"(SELECT source_id, identifier_key FROM records WHERE identifier_key IN {window_keys})"
    with_rows = [n for (n,) in con.execute(
        f"""
        SELECT DISTINCT l.w
        FROM {stored_keys} r
        JOIN g_windows g ON g.source_id = r.source_id
        JOIN g_latest l ON l.w = g.w AND l.identifier_key = r.identifier_key
        """
    ).fetchall()]
    if with_rows:
        listed = sql_list(with_rows)
        for table in ("g_files", "g_pages", "g_latest", "g_windows"):
            con.execute(f"DELETE FROM {table} WHERE w IN {listed}")
    if not con.execute("SELECT count(*) FROM g_windows").fetchone()[0]:
        return {}
    # Records without a row whose history shows they were stored: deleted by hand (as alone). The
    # embedded file reads the history of those it lists as stored once only (store/row_tally.py).
    tallies, restored = None, []
    if kind == EMBEDDED:
        sources = [s for (s,) in con.execute("SELECT source_id FROM g_windows").fetchall()]
        tallies = row_tally.ensure_removed_known(con, sources)
        restored = row_tally.removed_among(con, "SELECT g.source_id, l.identifier FROM g_latest l JOIN g_windows g ON g.w = l.w")
    only_removed = ("" if tallies is None else
                    "AND false" if not restored else f"AND h.identifier IN {sql_list(sorted({i for _, i in restored}))}")
    history = "record_history" if kind != POSTGRES else _pg_pairs(con, "identifier", "text", lambda pairs: (
        "SELECT h.identifier, h.datestamp, h.deleted, h.content_hash, h.received_at, h.source_id, h.action"
        f" FROM record_history h JOIN {pairs} ON h.source_id = k.source_id AND h.identifier = k.identifier"
        f" WHERE h.action IN ({STORING})"))
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE g_before AS
        SELECT l.w, h.identifier, {LAST_STORED_VERSION}
        FROM {history} h
        JOIN g_windows g ON g.source_id = h.source_id
        JOIN g_latest l ON l.w = g.w AND l.identifier = h.identifier
        WHERE h.action IN ({STORING}) {only_removed}
        GROUP BY l.w, h.identifier
        """
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE g_classified AS
        SELECT i.w, i.identifier, i.page_number, i.seq, h.first_seen_at, {ACTION_WITHOUT_ROW} AS action
        FROM (
            SELECT p.w, p.identifier, p.page_number, p.seq, p.datestamp, p.deleted, p.content_hash
            FROM {_PAGES} p
            JOIN g_latest l ON l.w = p.w AND l.identifier = p.identifier
             AND l.pos = {received_position('p')}
        ) i
        LEFT JOIN g_before h ON h.w = i.w AND h.identifier = i.identifier
        """
    )
    # Every action without a row writes the received version: each classified row is inserted.
    classified = f"""
        FROM {_PAGES} i
        JOIN g_classified c ON c.w = i.w AND c.identifier = i.identifier AND c.page_number = i.page_number AND c.seq = i.seq
        JOIN g_windows g ON g.w = i.w
    """
    con.execute(
        f"""
        INSERT INTO records ({INSERTED_COLUMNS})
        SELECT {inserted_values(source_id="g.source_id", run_id="g.run_id", window_start="g.window_start",
                                 window_end="g.window_end")}
        {classified}
        """,
        [now, now],
    )
    con.execute(
        f"""
        INSERT INTO record_history
        SELECT {history_values(source_id="g.source_id", window_start="g.window_start", window_end="g.window_end",
                                run_id="g.run_id", attempt_id="g.attempt_id")}
        {classified}
        """,
        [now],
    )
    if tallies is not None:
        row_tally.after_inserts(con, tallies, (
            "SELECT g.source_id, count(*), bit_xor(l.identifier_key) FROM g_classified c"
            " JOIN g_latest l ON l.w = c.w AND l.identifier = c.identifier JOIN g_windows g ON g.w = c.w"
            " GROUP BY g.source_id"), restored)
    by_action: dict[int, dict[str, int]] = {}
    for w, action, n in con.execute("SELECT w, action, count(*) FROM g_classified GROUP BY w, action").fetchall():
        by_action.setdefault(w, {})[action] = int(n)
    sizes = {w: (int(received), int(distinct)) for w, received, distinct in con.execute(
        "SELECT g.w, coalesce(sum(l.listed), 0), count(l.identifier) FROM g_windows g LEFT JOIN g_latest l ON l.w = g.w GROUP BY g.w"
    ).fetchall()}
    examples: dict[int, list[str]] = {}
    for w, identifier in con.execute(
        f"""
        SELECT w, identifier FROM (
            SELECT w, identifier, row_number() OVER (PARTITION BY w ORDER BY identifier) AS n FROM g_latest WHERE listed > 1
        ) WHERE n <= {DUPLICATE_EXAMPLES} ORDER BY w, identifier
        """
    ).fetchall():
        examples.setdefault(w, []).append(identifier)
    # Each window's preview of what it changed (as alone: every classified row here was written).
    previews: dict[int, list[tuple]] = {}
    for w, *row in con.execute(
        f"""
        SELECT w, identifier, datestamp, action, title FROM (
            SELECT *, row_number() OVER (PARTITION BY w ORDER BY {PREVIEW_ORDER}) AS n FROM (
                SELECT c.w, {PREVIEW_COLUMNS}
                FROM g_classified c
                JOIN {_PAGES} i ON i.w = c.w AND i.identifier = c.identifier AND i.page_number = c.page_number AND i.seq = c.seq
            )
        ) WHERE n <= {PREVIEW_ROWS} ORDER BY w, n
        """
    ).fetchall():
        previews.setdefault(w, []).append(tuple(row))
    counts = {}
    for w, (received, distinct) in sizes.items():
        actions = by_action.get(w, {})
        counts[w] = MergeCounts(
            received=received, distinct_received=distinct, stored=sum(actions.values()),
            duplicate_examples=tuple(examples.get(w, ())), changed_preview=tuple(previews.get(w, ())),
            **{a: actions.get(a, 0) for a in ACTIONS},
        )
    return counts
