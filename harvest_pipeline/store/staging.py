"""One window's staging folder: the pages received so far and the durable token cursor.

Each window harvest writes its pages into its own folder, append-only: a commit writes the pages'
rows as one Parquet file (and the quarantined records as another), then the cursor, a small JSON
file that holds the token after the last committed page and how many commits are on disk. Every
file is written under a temporary name, flushed to disk and renamed; the cursor comes last, so a
file it does not count (a crash between the two) is deleted when the window is opened again. A run
killed at any point thus resumes after the last committed page (the pages staged but not yet
committed are fetched again), and the shared catalogue file is locked only for the short merge at
the end, which reads these files directly (``store/merge.py``).

Parquet rather than Arrow IPC: the merge's DuckDB reads Parquet itself, within its memory limit and
skipping the row groups outside a slice of pages; an Arrow dataset scanned through Python held
the window's data in memory (1.6 GB at 1,000,000 records, bench --rss).
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from harvest_pipeline import open_files
from harvest_pipeline.crashpoints import crashpoint
from harvest_pipeline.errors import HarvestError, WindowBusyError
from harvest_pipeline.http.redaction import redact_text
from harvest_pipeline.store.clock import utcnow
from harvest_pipeline.store.columns import PAGE_COLUMNS
from harvest_pipeline.store.connection import remove_database_file

STAGING_SUFFIX = ".stage"
LEGACY_SUFFIX = ".duckdb"  # a window's staging DuckDB file, before staging folders
CURSOR_FILE = "cursor.json"
CURSOR_FORMAT = 1
# rows-<commit>-<first page>-<last page>.parquet (the pages it holds, for a reader's eyes);
# quarantine-<commit>.parquet. Two empty files give the merge the columns of a window with none.
_ROWS_FILE = re.compile(r"^rows-(\d+)-(\d+)-(\d+)\.parquet$")
_QUARANTINE_FILE = re.compile(r"^quarantine-(\d+)\.parquet$")
EMPTY_ROWS_FILE, EMPTY_QUARANTINE_FILE = "rows-empty.parquet", "quarantine-empty.parquet"
_TEMP_SUFFIX = ".tmp"
_WINDOW_NAME = re.compile(r"^\d{8}T\d{6}(-\d{8}T\d{6})?$")  # <start> or, for a sub-window, <start>-<end>

STAGING_COMMIT_ROWS_ENV = "HARVEST_STAGING_COMMIT_ROWS"
# Each commit costs a few file syncs; a crash re-fetches at most this many rows' pages (and at
# most STAGING_COMMIT_SECONDS of them).
DEFAULT_STAGING_COMMIT_ROWS = 1_000
STAGING_COMMIT_SECONDS = 2.0


def staging_commit_rows() -> int:
    """Rows staged before a commit (HARVEST_STAGING_COMMIT_ROWS; 0 or 1: every page)."""
    raw = os.environ.get(STAGING_COMMIT_ROWS_ENV)
    return max(0, int(raw)) if raw else DEFAULT_STAGING_COMMIT_ROWS


def quarantine_schema() -> pa.Schema:
    """A staged quarantine entry: (page_number, identifier, kind, error, raw bytes)."""
    return pa.schema([("page_number", pa.int32()), ("identifier", pa.string()), ("kind", pa.string()),
                      ("error", pa.string()), ("raw", pa.binary())])


def page_schema() -> pa.Schema:
    from harvest_pipeline.store.columns import PAGE_SCHEMA

    return PAGE_SCHEMA


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
    """data/staging/<source>/<window start>.stage next to the catalogue (source ids are [a-z0-9_])."""
    return Path(db_path).parent / "staging" / source_id / (window_start.strftime("%Y%m%dT%H%M%S") + STAGING_SUFFIX)


def staging_window_start(staging_folder: Path) -> datetime:
    """The window start a staging folder (or a sub-window's) is named after (the inverse of `staging_path`)."""
    return datetime.strptime(Path(staging_folder).stem.split("-")[0], "%Y%m%dT%H%M%S")


class StagingWindow:
    """The open staging folder of one window; only one process may hold it (a lock file beside it)."""

    def __init__(self, path: Path, *, wait_seconds: float = 5.0):
        self.path = path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        # The window is ours from here until release(): through the token loop AND the merge.
        self._lock = _acquire_window_lock(_lock_path(path), wait_seconds)
        self._given_back = False
        try:
            _finish_removal(path)
            # Said at the next start_attempt: the fresh traversal's cursor carries it.
            self._notes = _retire_legacy_file(path)
            try:
                path.mkdir(exist_ok=True)
                self._state = _load_cursor(path)
            except OSError as exc:
                raise HarvestError(
                    f"the window's staging folder {path} cannot be used: {exc}",
                    hint=open_files.limit_hint() if exc.errno in open_files.OUT_OF_FILES else
                    "move away or delete what is at that path (it only ever holds pages that can be fetched "
                    "again), then run the window again",
                ) from exc
        except BaseException:
            # Not ours after all: the error's traceback may outlive this call (a sequence keeps
            # each window's error), and must not keep the window locked.
            self._lock.close()
            raise
        self._pending: list[_PendingPage] = []  # staged pages not yet committed

    # --- cursor -------------------------------------------------------------------------
    def cursor(self) -> CursorState | None:
        s = self._state
        if s is None:
            return None
        return CursorState(
            s["attempt_id"], s["request_key"], s["token"], s["closed"], s["pages"], s["received"],
            s["complete_list_size"], s["response_date"], list(s["warnings"]), s["repaired"],
            s["quarantined_unparsed"],
        )

    def start_attempt(self, attempt_id: str, request_key: str) -> None:
        """Forget any earlier traversal and begin a new one from the window's from-bound."""
        now = utcnow().isoformat()
        self._pending = []
        notes, self._notes = self._notes, []
        # The new cursor first: the files of the earlier traversal are then beyond it, and a crash
        # before they are gone leaves them to the next open, which deletes them.
        _write_cursor(self.path, {
            "format": CURSOR_FORMAT, "attempt_id": attempt_id, "request_key": request_key, "token": None,
            "closed": False, "pages": 0, "received": 0, "complete_list_size": None, "response_date": None,
            "warnings": [redact_text(n) for n in notes], "repaired": 0, "quarantined_unparsed": 0,
            "outside_window": 0, "first_identifier": None, "commits": 0, "row_files": 0,
            "quarantine_files": 0, "started_at": now, "updated_at": now,
        })
        self._state = _load_cursor(self.path)

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
        """Write the staged pages, then advance the cursor past the last of them.

        Returns how many pages were committed. The cursor's token is the one after the last page;
        its list size and response date the first ones any page carried.
        """
        pending, self._pending = self._pending, []
        if not pending:
            return 0
        commit = self._state["commits"] + 1
        try:
            return self._commit(pending, commit)
        except Exception:
            # Not committed, and this process goes on: the next commit takes this number, maybe
            # with other pages. (A process that ends here leaves the files to the next open.)
            _delete_commit_files(self.path, commit)
            raise

    def _commit(self, pending: list[_PendingPage], commit: int) -> int:
        state = dict(self._state)
        warnings = [redact_text(w) for p in pending for w in p.warnings]  # no configured secret is ever stored
        tables = [_page_table(p.rows) for p in pending if p.rows.num_rows]
        rows = (tables[0] if len(tables) == 1 else pa.concat_tables(tables)) if tables else None
        quarantined = [(*q[:3], redact_text(q[3]) if q[3] else q[3], *q[4:]) for p in pending for q in p.quarantined]
        if rows is not None:
            import pyarrow.compute as pc

            pages = pc.min_max(rows.column("page_number"))
            _write_parquet(self.path, f"rows-{commit:06d}-{pages['min'].as_py()}-{pages['max'].as_py()}.parquet", rows)
            state["row_files"] += 1
            state["received"] += rows.num_rows
            state["outside_window"] += int(pc.sum(pc.invert(rows.column("in_window"))).as_py() or 0)  # NULL: not outside
            if state["first_identifier"] is None:
                first = pc.sort_indices(rows.select(["page_number", "seq"]),
                                        sort_keys=[("page_number", "ascending"), ("seq", "ascending")])[0].as_py()
                state["first_identifier"] = rows.column("identifier")[first].as_py()
        if quarantined:
            table = pa.Table.from_pylist(
                [dict(zip(quarantine_schema().names, q)) for q in quarantined], schema=quarantine_schema()
            )
            _write_parquet(self.path, f"quarantine-{commit:06d}.parquet", table)
            state["quarantine_files"] += 1
            state["quarantined_unparsed"] += sum(1 for q in quarantined if q[2] == "parse")
        crashpoint("mid-page-write")
        last = pending[-1]
        state.update(
            commits=commit, token=last.next_token, closed=last.next_token is None,
            pages=state["pages"] + len(pending), repaired=state["repaired"] + sum(p.repaired for p in pending),
            warnings=state["warnings"] + warnings, updated_at=utcnow().isoformat(),
        )
        if state["complete_list_size"] is None:
            state["complete_list_size"] = next((p.complete_list_size for p in pending if p.complete_list_size is not None), None)
        if state["response_date"] is None:
            state["response_date"] = next((p.response_date for p in pending if p.response_date is not None), None)
        _write_cursor(self.path, state)
        self._state = state
        return len(pending)

    def add_warning(self, text: str) -> None:
        if self._state is None:
            return
        state = dict(self._state, warnings=self._state["warnings"] + [redact_text(text)])
        _write_cursor(self.path, state)
        self._state = state

    def outside_window_count(self) -> int:
        return int(self._state["outside_window"]) if self._state else 0

    def first_identifier(self) -> str | None:
        """The identifier the traversal started with (a resumed traversal's restart guard needs it)."""
        return self._state["first_identifier"] if self._state else None

    def close(self) -> None:
        self._pending = []  # never committed: fetched again by the next run
        if self._state is not None and self._state["received"] >= GIVE_BACK_AFTER_ROWS and not self._given_back:
            self._given_back = True
            _give_back_memory()

    def remove(self) -> None:
        """Delete the staging folder after its rows are merged into the catalogue."""
        self.close()
        self._state = None
        _remove_folder(self.path)

    def release(self) -> None:
        """Give the window up to the next run."""
        self.close()
        if self._lock is not None:
            self._lock.close()  # closing the descriptor drops the flock
            self._lock = None

    def __enter__(self) -> "StagingWindow":
        return self

    def __exit__(self, *exc) -> None:
        self.release()


def _delete_commit_files(folder: Path, commit: int) -> None:
    for entry in folder.iterdir():
        m = _ROWS_FILE.match(entry.name) or _QUARANTINE_FILE.match(entry.name)
        if m and int(m.group(1)) == commit:
            entry.unlink(missing_ok=True)


# A window this large leaves tens of MB of freed buffers behind, handed back before its merge. A
# small window's are reused by the next one: giving them back costs more than it frees (glibc walks
# every thread's heap, and the pages are faulted in again). In a process harvesting 100 sources at
# once, malloc_trim alone was 3% of the CPU samples (perf).
GIVE_BACK_AFTER_ROWS = 20_000


def _give_back_memory() -> None:
    """Hand the token loop's freed memory (pages, trees, Arrow buffers) back to the system before
    the merge's DuckDB takes its own: glibc and Arrow's allocator otherwise keep it, and the two
    peaks add up."""
    pa.default_memory_pool().release_unused()
    if _malloc_trim is not None:
        _malloc_trim(0)


def _glibc_malloc_trim():
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


_malloc_trim = _glibc_malloc_trim()


def _page_table(rows: pa.Table) -> pa.Table:
    """The page in the staged schema, by column name (every file of a window has the same one)."""
    schema = page_schema()
    if rows.schema.equals(schema):
        return rows
    return rows.select(list(PAGE_COLUMNS)).cast(schema)


def staged_files(path: Path) -> tuple[list[tuple[Path, int, int]], list[Path]]:
    """The committed files of a staging folder: (rows file, first page, last page) and the
    quarantine files, in commit order."""
    state = _read_cursor(Path(path) / CURSOR_FILE)
    commits = state["commits"] if state else 0
    rows, quarantine = [], []
    for entry in sorted(Path(path).iterdir()) if Path(path).is_dir() else []:
        if m := _ROWS_FILE.match(entry.name):
            if int(m.group(1)) <= commits:
                rows.append((entry, int(m.group(2)), int(m.group(3))))
        elif (m := _QUARANTINE_FILE.match(entry.name)) and int(m.group(1)) <= commits:
            quarantine.append(entry)
    return rows, quarantine


def staged_file_lists(path: Path) -> tuple[list[str], list[str]]:
    """What a reader of the staging folder scans: its committed rows files and quarantine files;
    when there are none, the empty file that has the columns (each file read costs a few ms)."""
    rows, quarantine = staged_files(path)
    path = Path(path)
    return ([str(f) for f, _, _ in rows] or [_empty_file(path, EMPTY_ROWS_FILE, page_schema)],
            [str(f) for f in quarantine] or [_empty_file(path, EMPTY_QUARANTINE_FILE, quarantine_schema)])


def _empty_file(folder: Path, name: str, schema) -> str:
    """The folder's empty file with the columns, written when first asked for: most windows
    have pages and quarantine nothing, and two files written and synced at each window's start
    were a few ms of its CPU."""
    if not (folder / name).is_file():
        _write_parquet(folder, name, schema().empty_table())
    return str(folder / name)


def staged_datasets(path: Path):
    """The committed rows and quarantine entries of a staging folder as Arrow datasets (to look
    inside one: ``rows.to_table(columns=[...])``)."""
    import pyarrow.dataset as ds

    rows, quarantine = staged_file_lists(path)
    return (ds.dataset(rows, schema=page_schema(), format="parquet"),
            ds.dataset(quarantine, schema=quarantine_schema(), format="parquet"))


def _write_parquet(folder: Path, name: str, table: pa.Table) -> None:
    """Write the table as a Parquet file, durably, under its final name (temp, sync, rename).

    LZ4, no dictionaries, statistics on the page position only: a commit writes a few MB, and
    what the merge filters on is the page."""
    import pyarrow.parquet as pq

    temp = folder / (name + _TEMP_SUFFIX)
    with open(temp, "wb") as out:
        pq.write_table(table, out, compression="lz4", use_dictionary=False,
                       write_statistics=["page_number", "seq"] if "seq" in table.schema.names else ["page_number"])
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, folder / name)


def _write_cursor(folder: Path, state: dict) -> None:
    """Replace the cursor atomically: temp file, sync, rename, sync the folder (which also makes
    the renames of the data files before it durable)."""
    temp = folder / (CURSOR_FILE + _TEMP_SUFFIX)
    with open(temp, "w", encoding="utf-8") as out:
        # dumps, not dump: json.dump writes piece by piece through the pure-Python encoder (about
        # 5% of a 100-source batch run's CPU samples went there).
        out.write(json.dumps(state, separators=(",", ":")))
        out.flush()
        os.fsync(out.fileno())
    os.replace(temp, folder / CURSOR_FILE)
    _sync_folder(folder)


def _sync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_cursor(cursor_file: Path) -> dict | None:
    """The cursor, or None when there is none or it is unreadable (torn by an OS crash)."""
    try:
        state = json.loads(cursor_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(state, dict) or state.get("format") != CURSOR_FORMAT:
        return None
    return state


def _load_cursor(folder: Path) -> dict | None:
    """Open the folder's traversal: delete what the cursor does not count (written after the last
    commit, or temporary); a cursor that is unreadable, or counts files that are not there (an OS
    crash), starts the window over from its from-bound: the folder only ever holds pages that can
    be fetched again."""
    state = _read_cursor(folder / CURSOR_FILE)
    commits = state["commits"] if state else 0
    row_files = quarantine_files = 0
    for entry in folder.iterdir():
        if entry.name in (CURSOR_FILE, EMPTY_ROWS_FILE, EMPTY_QUARANTINE_FILE):
            continue
        m = _ROWS_FILE.match(entry.name) or _QUARANTINE_FILE.match(entry.name)
        if m and int(m.group(1)) <= commits:
            if entry.name.startswith("rows-"):
                row_files += 1
            else:
                quarantine_files += 1
        elif entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)  # not ours (an earlier version's duplicate-count spill)
        else:
            entry.unlink(missing_ok=True)
    if state is not None and (
        (row_files, quarantine_files) != (state["row_files"], state["quarantine_files"])
    ):
        state = None
    if state is None:
        for entry in folder.iterdir():
            if entry.is_file():
                entry.unlink()
    return state


def _lock_path(path: Path) -> Path:
    return path.with_name(path.name + ".lock")


def _removal_path(path: Path) -> Path:
    return path.with_name(path.name + ".removing")


def _remove_folder(path: Path) -> None:
    """Rename, then delete: a crash midway never leaves a folder with some of its files."""
    if not path.exists():
        return
    gone = _removal_path(path)
    os.replace(path, gone) if not gone.exists() else shutil.rmtree(path)
    shutil.rmtree(gone, ignore_errors=True)


def _finish_removal(path: Path) -> None:
    gone = _removal_path(path)
    if gone.exists():
        shutil.rmtree(gone, ignore_errors=True)


def _retire_legacy_file(path: Path) -> list[str]:
    """A staging DuckDB file an earlier version left for this window: delete it and start over
    (it only holds pages that can be fetched again). Returns the warning that says so."""
    legacy = path.with_suffix(LEGACY_SUFFIX)
    if path.suffix != STAGING_SUFFIX or not legacy.is_file():
        return []
    # A run of the earlier version may still hold it (an upgrade while it harvests).
    with _acquire_window_lock(_lock_path(legacy), 0.0):
        remove_database_file(legacy)
    _lock_path(legacy).unlink(missing_ok=True)
    return [f"the window's staging file from an earlier version ({legacy.name}) was deleted; "
            "the window started again from its from-bound"]


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
    """Windows' staging folders left on disk: interrupted mid-harvest (or being harvested now);
    staging files of an earlier version included."""
    root = Path(db_path).parent / "staging"
    if source_id:
        root = root / source_id
    if not root.exists():
        return []
    return sorted(p for suffix in (STAGING_SUFFIX, LEGACY_SUFFIX) for p in root.rglob("*" + suffix)
                  if _WINDOW_NAME.match(p.stem) and (p.is_dir() if suffix == STAGING_SUFFIX else p.is_file()))


def window_is_locked(staging_folder: Path) -> bool:
    """True while a run holds the window (harvesting or merging it)."""
    lock_path = _lock_path(staging_folder)
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
    "staged_datasets",
    "staged_file_lists",
    "staging_path",
    "open_staging_files",
]
