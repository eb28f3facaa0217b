"""One window's staging file: the pages received so far and the durable token cursor.

Each window harvest writes its pages into its own small DuckDB file. One transaction holds one or
more pages' rows *and* the token that follows the last of them. So a run killed at any point
resumes after the last committed page (the pages staged but not yet committed are fetched again),
and the shared catalogue file is locked only for the short merge at the end, which lets windows
of different sources harvest at the same time.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from harvest_pipeline.crashpoints import crashpoint
from harvest_pipeline.errors import HarvestError, StoreLockedError, WindowBusyError
from harvest_pipeline.http.redaction import redact_text
from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.columns import PAGE_COLUMNS, create_page_records_sql
from harvest_pipeline.store.connection import open_with_retry, remove_database_file

_DDL = create_page_records_sql() + """
CREATE TABLE IF NOT EXISTS page_quarantine (
    page_number INTEGER, identifier VARCHAR, kind VARCHAR, error VARCHAR, raw BLOB
);
CREATE TABLE IF NOT EXISTS window_cursor (
    id                   INTEGER PRIMARY KEY,   -- always 1: one cursor per staging file
    attempt_id           VARCHAR NOT NULL,      -- the run that started this traversal
    request_key          VARCHAR NOT NULL,      -- prefix/set/from/until: a changed request restarts
    token                VARCHAR,               -- fetches the next page; NULL = first request / done
    closed               BOOLEAN NOT NULL,      -- the list ended with an absent or empty token
    pages                INTEGER NOT NULL,
    received             BIGINT NOT NULL,
    complete_list_size   BIGINT,                -- from the first page that carried one
    repaired             BIGINT NOT NULL DEFAULT 0,
    response_date        VARCHAR,               -- of the first page
    warnings             VARCHAR[] NOT NULL,
    started_at           TIMESTAMP NOT NULL,
    updated_at           TIMESTAMP NOT NULL
);
"""


# A staging file only appends pages and is thrown away after its merge, so its connection is
# set for that: a small buffer pool (nothing is read back until the merge, which the catalogue's
# connection does) and checkpoints rarely (each one rewrites the pages already written). An OS
# crash can only cost this disposable file: a file that no longer opens is started over.
STAGING_SETTINGS = {"memory_limit": "64MB", "checkpoint_threshold": "64MB", "threads": 1}
# A checkpoint holds about one row group in memory: DuckDB's default of 122,880 rows of raw XML
# cost ~160 MB per checkpoint of 100,000 records, 16,384 rows cost ~25 MB (bench --rss).
STAGING_ROW_GROUP_SIZE = 16_384


STAGING_COMMIT_ROWS_ENV = "HARVEST_STAGING_COMMIT_ROWS"
# Each commit costs about as much as writing a few hundred rows; a crash re-fetches at most this
# many rows' pages (and at most STAGING_COMMIT_SECONDS of them).
DEFAULT_STAGING_COMMIT_ROWS = 1_000
STAGING_COMMIT_SECONDS = 2.0


def staging_commit_rows() -> int:
    """Rows staged before a commit (HARVEST_STAGING_COMMIT_ROWS; 0 or 1: every page)."""
    raw = os.environ.get(STAGING_COMMIT_ROWS_ENV)
    return max(0, int(raw)) if raw else DEFAULT_STAGING_COMMIT_ROWS


@dataclass
class _PendingPage:
    rows: pa.Table
    next_token: str | None
    complete_list_size: int | None
    response_date: str | None
    warnings: list[str]
    quarantined: list[tuple] = field(default_factory=list)
    repaired: int = 0


@dataclass(frozen=True)
class CursorState:
    attempt_id: str
    request_key: str
    token: str | None
    closed: bool
    pages: int
    received: int
    complete_list_size: int | None
    response_date: str | None
    warnings: list[str]
    repaired: int = 0
    quarantined_unparsed: int = 0


def staging_path(db_path: str | Path, source_id: str, window_start: datetime) -> Path:
    """data/staging/<source>/<window start>.duckdb next to the catalogue (source ids are [a-z0-9_])."""
    return Path(db_path).parent / "staging" / source_id / (window_start.strftime("%Y%m%dT%H%M%S") + ".duckdb")


def staging_window_start(staging_file: Path) -> datetime:
    """The window start a staging file is named after (the inverse of `staging_path`)."""
    return datetime.strptime(Path(staging_file).stem, "%Y%m%dT%H%M%S")


class StagingWindow:
    """The open staging file of one window; only one process may hold it (DuckDB's file lock)."""

    def __init__(self, path: Path, *, wait_seconds: float = 5.0):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # The window is ours from here until release(): through the token loop AND the merge,
        # during which the staging file itself is closed (the catalogue attaches it).
        self._lock = _acquire_window_lock(path.with_name(path.name + ".lock"), wait_seconds)
        try:
            self.con = _open_or_start_over(path, wait_seconds)
            self.con.execute(_DDL)
        except BaseException:
            # Not ours after all: the error's traceback may outlive this call (a sequence keeps
            # each window's error), and must not keep the window locked.
            if getattr(self, "con", None) is not None:
                self.con.close()
            self._lock.close()
            raise
        self._pending: list[_PendingPage] = []  # staged pages not yet committed

    # --- cursor -------------------------------------------------------------------------
    def cursor(self) -> CursorState | None:
        row = self.con.execute(
            "SELECT attempt_id, request_key, token, closed, pages, received, complete_list_size,"
            " response_date, warnings, repaired,"
            " (SELECT count(*) FROM page_quarantine WHERE kind = 'parse') FROM window_cursor WHERE id = 1"
        ).fetchone()
        return CursorState(*row[:8], list(row[8] or []), int(row[9]), int(row[10])) if row else None

    def start_attempt(self, attempt_id: str, request_key: str) -> None:
        """Forget any earlier traversal and begin a new one from the window's from-bound."""
        now = utcnow()
        self._pending = []
        self.con.execute("BEGIN TRANSACTION")
        self.con.execute("DELETE FROM page_records")
        self.con.execute("DELETE FROM page_quarantine")
        self.con.execute("DELETE FROM window_cursor")
        self.con.execute(
            "INSERT INTO window_cursor (id, attempt_id, request_key, token, closed, pages, received,"
            " complete_list_size, response_date, warnings, started_at, updated_at)"
            " VALUES (1, ?, ?, NULL, false, 0, 0, NULL, NULL, [], ?, ?)",
            [attempt_id, request_key, now, now],
        )
        self.con.execute("COMMIT")

    def write_page(
        self,
        rows: pa.Table,
        *,
        next_token: str | None,
        complete_list_size: int | None,
        response_date: str | None,
        warnings: list[str],
        quarantined: list[tuple] = (),
        repaired: int = 0,
    ) -> None:
        """Store a page's rows (and quarantined records) and advance the cursor past it, atomically
        (`stage_page` then `commit_pages`)."""
        self.stage_page(rows, next_token=next_token, complete_list_size=complete_list_size,
                        response_date=response_date, warnings=warnings, quarantined=quarantined, repaired=repaired)
        self.commit_pages()

    def stage_page(
        self,
        rows: pa.Table,
        *,
        next_token: str | None,
        complete_list_size: int | None,
        response_date: str | None,
        warnings: list[str],
        quarantined: list[tuple] = (),
        repaired: int = 0,
    ) -> None:
        """Keep a page to commit with the next ones (`commit_pages`); lost if the process dies first.

        `quarantined`: (page_number, identifier, kind, error, raw bytes) tuples.
        """
        self._pending.append(_PendingPage(rows, next_token, complete_list_size, response_date, list(warnings),
                                          list(quarantined), repaired))

    @property
    def pending_rows(self) -> int:
        return sum(p.rows.num_rows for p in self._pending)

    @property
    def pending_pages(self) -> int:
        return len(self._pending)

    def commit_pages(self) -> int:
        """Write the staged pages and advance the cursor past the last of them, in one transaction.

        Returns how many pages were committed. The cursor's token is the one after the last page;
        its list size and response date the first ones any page carried.
        """
        pending, self._pending = self._pending, []
        if not pending:
            return 0
        warnings = [redact_text(w) for p in pending for w in p.warnings]  # no configured secret is ever stored
        tables = [p.rows for p in pending if p.rows.num_rows]
        received = sum(t.num_rows for t in tables)
        quarantined = [(*q[:3], redact_text(q[3]) if q[3] else q[3], *q[4:]) for p in pending for q in p.quarantined]
        last = pending[-1]
        size = next((p.complete_list_size for p in pending if p.complete_list_size is not None), None)
        response_date = next((p.response_date for p in pending if p.response_date is not None), None)
        self.con.execute("BEGIN TRANSACTION")
        try:
            if tables:
                self.con.register("page_rows", tables[0] if len(tables) == 1 else pa.concat_tables(tables))
                # By name: a staging file resumed after an upgrade may order its columns differently.
                columns = ", ".join(PAGE_COLUMNS)
                self.con.execute(f"INSERT INTO page_records ({columns}) SELECT {columns} FROM page_rows")
                self.con.unregister("page_rows")
            if quarantined:
                self.con.executemany("INSERT INTO page_quarantine VALUES (?, ?, ?, ?, ?)", quarantined)
            crashpoint("mid-page-write")
            self.con.execute(
                """
                UPDATE window_cursor SET
                    token = ?, closed = ?, pages = pages + ?, received = received + ?, repaired = repaired + ?,
                    complete_list_size = coalesce(complete_list_size, ?),
                    response_date = coalesce(response_date, ?),
                    warnings = list_concat(warnings, ?::VARCHAR[]),
                    updated_at = ?
                WHERE id = 1
                """,
                [last.next_token, last.next_token is None, len(pending), received, sum(p.repaired for p in pending),
                 size, response_date, warnings, utcnow()],
            )
            self.con.execute("COMMIT")
        except Exception:
            self.con.execute("ROLLBACK")
            raise
        return len(pending)

    def add_warning(self, text: str) -> None:
        self.con.execute("UPDATE window_cursor SET warnings = list_append(warnings, ?) WHERE id = 1", [redact_text(text)])

    def duplicate_identifiers(self, limit: int = 5) -> tuple[int, list[str]]:
        """How many received rows repeat an identifier already received in this traversal."""
        total = self.con.execute("SELECT count(*) - count(DISTINCT identifier) FROM page_records").fetchone()[0]
        examples = [
            r[0]
            for r in self.con.execute(
                "SELECT identifier FROM page_records GROUP BY identifier HAVING count(*) > 1 ORDER BY 1 LIMIT ?",
                [limit],
            ).fetchall()
        ]
        return int(total), examples

    def outside_window_count(self) -> int:
        return int(self.con.execute("SELECT count(*) FROM page_records WHERE NOT in_window").fetchone()[0])

    def first_identifier(self) -> str | None:
        """The identifier the traversal started with (a resumed traversal's restart guard needs it)."""
        row = self.con.execute("SELECT identifier FROM page_records ORDER BY page_number, seq LIMIT 1").fetchone()
        return row[0] if row else None

    def close(self) -> None:
        self._pending = []  # never committed: fetched again by the next run
        if self.con is not None:
            self.con.close()
            self.con = None

    def remove(self) -> None:
        """Delete the staging file after its rows are merged into the catalogue."""
        self.close()
        remove_database_file(self.path)

    def release(self) -> None:
        """Close the file and give the window up to the next run."""
        self.close()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor drops the flock
            self._lock = None

    def __enter__(self) -> "StagingWindow":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _open_or_start_over(path: Path, wait_seconds: float):
    """Open the staging file; one that no longer opens (torn by an OS crash) is removed and the
    window starts over from its from-bound: it only ever holds pages that can be fetched again."""
    try:
        return open_with_retry(path, wait_seconds=wait_seconds, settings=STAGING_SETTINGS,
                               row_group_size=STAGING_ROW_GROUP_SIZE)
    except HarvestError as exc:
        if isinstance(exc, StoreLockedError) or not path.exists():
            raise
        remove_database_file(path)
        return open_with_retry(path, wait_seconds=wait_seconds, settings=STAGING_SETTINGS,
                               row_group_size=STAGING_ROW_GROUP_SIZE)


def _acquire_window_lock(lock_path: Path, wait_seconds: float):
    deadline = time.monotonic() + wait_seconds
    handle = open(lock_path, "a+")
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return handle
        except BlockingIOError:
            if time.monotonic() >= deadline:
                handle.close()
                raise WindowBusyError(
                    f"window staging file {lock_path.with_suffix('')} is locked",
                    hint="another run is harvesting this window right now; wait for it to finish, then re-run",
                ) from None
            time.sleep(0.1)


def open_staging_files(db_path: str | Path, source_id: str | None = None) -> list[Path]:
    """Staging files left on disk: windows interrupted mid-harvest (or being harvested now)."""
    root = Path(db_path).parent / "staging"
    if source_id:
        root = root / source_id
    return sorted(root.rglob("*.duckdb")) if root.exists() else []


def window_is_locked(staging_file: Path) -> bool:
    """True while a run holds the window (harvesting or merging it)."""
    lock_path = staging_file.with_name(staging_file.name + ".lock")
    if not lock_path.exists():
        return False
    with open(lock_path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        return False


__all__ = [
    "CursorState",
    "StagingWindow",
    "staging_path",
    "open_staging_files",
]
