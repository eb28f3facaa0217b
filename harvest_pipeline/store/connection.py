"""Opening the DuckDB file, waiting politely when another process holds its lock.

DuckDB allows one writing process per file and even read-only opens fail while a writer holds
it, so every open retries with jittered backoff and then fails with a message saying who to wait for.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from harvest_pipeline.errors import HarvestError, StoreLockedError

log = logging.getLogger(__name__)

DEFAULT_DB_PATH = "data/harvest.duckdb"
DEFAULT_MEMORY_LIMIT = "128MB"
# An open that waited this long for the file says so (a run otherwise sits silent meanwhile).
LONG_WAIT_SECONDS = 5.0
# DuckDB's threads per catalogue instance (default: one per core). Batch runs set 1: their sources'
# threads are the parallelism, and a small window's statements cost ~15% less CPU on one thread.
THREADS_ENV = "HARVEST_DUCKDB_THREADS"


def configured_memory_limit() -> str:
    """DuckDB's memory limit for every connection (HARVEST_DUCKDB_MEMORY_LIMIT, default 128MB)."""
    return os.environ.get("HARVEST_DUCKDB_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT


def default_db_path() -> Path:
    return Path(os.environ.get("HARVEST_DUCKDB_PATH") or DEFAULT_DB_PATH)


def catalogue_exists(path: str | Path | None = None) -> bool:
    """Whether there is a catalogue to read: the file exists, or a shared catalogue is configured."""
    from harvest_pipeline.store.backend import catalogue_settings

    return catalogue_settings().shared or Path(path or default_db_path()).exists()


def wanted_path(db_path: str | Path) -> Path:
    """The file a process touches while it waits for the catalogue another process holds open.

    A run that keeps the catalogue open between its writes (store/session.py) looks at this file's
    time before each write and lets the file go when someone has asked since it opened it."""
    path = Path(db_path)
    return path.parent / "locks" / (path.name + ".wanted")


def _say_wanted(db_path: Path) -> None:
    want = wanted_path(db_path)
    try:
        want.parent.mkdir(parents=True, exist_ok=True)
        want.touch()
    except OSError:
        pass  # only a hint: the holder also lets go after its longest hold


def _is_lock_error(exc: Exception) -> bool:
    text = str(exc)
    return "lock" in text.lower() or "Conflicting" in text


def connection_config(db_path: str | Path) -> dict:
    """DuckDB settings for every connection: bounded memory, spilling next to the file.

    DuckDB's default memory limit is 80% of RAM; a million-record window would take it. With a
    limit and a temp directory, large merges spill to disk instead of growing the process.
    """
    spill_root = Path(db_path).parent / "duckdb_tmp"
    spill_root.mkdir(parents=True, exist_ok=True)  # DuckDB makes the last level only
    threads = os.environ.get(THREADS_ENV)
    return {
        **({"threads": int(threads)} if threads else {}),
        "memory_limit": configured_memory_limit(),
        # One folder per process: DuckDB names its spill files the same in every process.
        "temp_directory": str(spill_root / str(os.getpid())),
        "preserve_insertion_order": False,
        # A file this connects to first is created in this format (an older file stays as it is here;
        # the catalogue's ATTACH in _connect converts it).
        "storage_compatibility_version": CATALOGUE_STORAGE_VERSION,
    }


def _is_same_process_conflict(exc: Exception) -> bool:
    # DuckDB keeps one database instance per file inside a process; an open whose configuration
    # (read_only included) differs from the connections already open there is refused at once,
    # and so is a file attached by another instance of this process.
    return "different configuration" in str(exc) or "Unique file handle conflict" in str(exc)


def _is_being_created(exc: Exception, path: Path) -> bool:
    # Another process is writing the file's first bytes right now (two runs on a fresh catalogue).
    return "not a valid DuckDB database file" in str(exc) and path.exists() and path.stat().st_size < 1 << 20


def _connect(path: Path, read_only: bool, config: dict, row_group_size: int | None) -> duckdb.DuckDBPyConnection:
    if not row_group_size:
        return duckdb.connect(str(path), read_only=read_only, config=config)
    # The row group size is an option of ATTACH (not stored in the file): the file is attached to
    # an in-memory instance and made the default database, so unqualified names find its tables.
    con = duckdb.connect(":memory:", config=config)
    try:
        options = (f"ROW_GROUP_SIZE {int(row_group_size)}, STORAGE_VERSION '{CATALOGUE_STORAGE_VERSION}'"
                   + (", READ_ONLY" if read_only else ""))
        con.execute(f"ATTACH '{str(path).replace(chr(39), chr(39) * 2)}' AS {ATTACHED_ALIAS} ({options})")
        con.execute(f"USE {ATTACHED_ALIAS}")
    except BaseException:
        con.close()
        raise
    return con


# DuckDB's storage format of the catalogue file: v1.2 is the first that stores strings with zstd
# (the raw XML, store/columns.py). DuckDB writes older files in their own format unless told; the
# setting does not reach a file ATTACHed, hence the option in _connect too. Files in this format
# need DuckDB 1.2 or later to read.
CATALOGUE_STORAGE_VERSION = "v1.2.0"

# The name under which a file opened with a row group size is attached (its default database).
ATTACHED_ALIAS = "attached_file"

# The catalogue's row group size. A checkpoint (the merge's commit) holds about one row group of
# the table it writes in memory: DuckDB's default, 122,880 rows, of records with their raw XML
# cost ~200 MB above the rest of a window harvest; 16,384 rows cost ~25 MB (bench --rss).
CATALOGUE_ROW_GROUP_SIZE = 16_384


class _SharedCatalogue:
    """One in-memory DuckDB instance with the catalogue file attached, shared by this process's
    open connections to that file (each gets a cursor of it), closed when the last one closes.

    DuckDB itself shares one instance per file between `duckdb.connect(path)` calls of a
    process; a file attached to an in-memory instance must be shared by hand: a second instance
    attaching the same file is refused ("Unique file handle conflict")."""

    _lock = threading.Lock()
    _open: dict[Path, "_SharedCatalogue"] = {}

    def __init__(self, root: duckdb.DuckDBPyConnection, read_only: bool):
        self.root, self.read_only, self.users = root, read_only, 0

    @classmethod
    def cursor(cls, path: Path, read_only: bool, config: dict) -> duckdb.DuckDBPyConnection:
        key = path.resolve()
        with cls._lock:
            shared = cls._open.get(key)
            if shared is None:
                shared = cls(_connect(path, read_only, config, CATALOGUE_ROW_GROUP_SIZE), read_only)
                cls._open[key] = shared
            elif shared.read_only and not read_only:
                # Handled as DuckDB's own same-process refusal: wait for the readers to close.
                raise duckdb.ConnectionException(
                    f"{path} is open read-only in this process; a connection with a different configuration waits"
                )
            con = shared.root.cursor()
            shared.users += 1
        # Outside the lock: a statement gives up the GIL, and taking it back can wait for other
        # threads; the lock held meanwhile would make every other thread's open wait too.
        try:
            con.execute(f"USE {ATTACHED_ALIAS}")
        except BaseException:
            cls.release(path, con)
            raise
        return con

    @classmethod
    def release(cls, path: Path, con: duckdb.DuckDBPyConnection) -> None:
        key = path.resolve()
        with cls._lock:
            con.close()
            shared = cls._open.get(key)
            if shared is None:
                return
            shared.users -= 1
            if shared.users <= 0:
                cls._close(key)

    @classmethod
    def _close(cls, key: Path) -> None:
        shared = cls._open.pop(key)
        shared.root.close()  # the last connection: the file's lock is given up


def open_with_retry(
    path: str | Path, *, read_only: bool = False, wait_seconds: float = 120.0, shared: bool = False,
) -> duckdb.DuckDBPyConnection:
    """Connect with :func:`connection_config`, waiting for another process's lock.

    `shared`: the catalogue, opened with CATALOGUE_ROW_GROUP_SIZE and shared within this process
    (close it with :func:`close_catalogue`); otherwise a plain connection of its own (the
    reconciliation's scratch file)."""
    path = Path(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    deadline = started + wait_seconds
    delay = 0.02
    while True:
        try:
            config = connection_config(path)
            if shared:
                con = _SharedCatalogue.cursor(path, read_only, config)
            else:
                con = _connect(path, read_only, config, None)
            _say_if_long(path, started)
            return con
        except (duckdb.IOException, duckdb.ConnectionException, duckdb.InvalidInputException, duckdb.BinderException) as exc:
            if _is_being_created(exc, path) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            if _is_same_process_conflict(exc):
                if read_only:
                    # This process already has the file open for writing (a sensor next to another
                    # in the code server): share that instance; the caller only reads.
                    try:
                        return duckdb.connect(str(path), read_only=False, config=connection_config(path))
                    except (duckdb.IOException, duckdb.ConnectionException, duckdb.InvalidInputException,
                            duckdb.BinderException):
                        pass
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f"could not open {path}: {exc}",
                        hint=(
                            "this process already holds the file open "
                            f"{'for writing' if read_only else 'read-only'} (another thread: a sensor, a "
                            "resource), or opened it by duckdb.connect() rather than store.connection.open_catalogue, "
                            "and DuckDB refuses a second configuration of one file in one process; "
                            "it opens once that connection is closed"
                        ),
                    ) from exc
                time.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 0.25)
                continue
            if read_only and not path.exists():
                raise HarvestError(
                    f"the catalogue {path} does not exist yet",
                    hint="no harvest has run against it; check HARVEST_DUCKDB_PATH or harvest a window first",
                ) from exc
            if not _is_lock_error(exc):
                raise HarvestError(f"could not open {path}: {exc}", hint="check HARVEST_DUCKDB_PATH and the file's permissions") from exc
            _say_wanted(path)
            if time.monotonic() >= deadline:
                raise StoreLockedError(
                    f"could not open {path}: {exc}",
                    hint=(
                        "another process (a Dagster run, the sensor or a CLI command) is writing to "
                        "the DuckDB file; retry when it has finished, or raise the wait"
                    ),
                ) from exc
            time.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 0.25)  # merges are short: poll often, so waiting runs follow closely


def _say_if_long(path: Path, started: float) -> None:
    waited = time.monotonic() - started
    if waited >= LONG_WAIT_SECONDS:
        log.warning("waited %.1f s to open the catalogue %s: another process (a Dagster run, the sensor, "
                    "a CLI command) or another connection of this one held it", waited, path)


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN, then COMMIT on success or ROLLBACK on any error (the error is re-raised)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
    except BaseException:
        con.execute("ROLLBACK")
        raise
    con.execute("COMMIT")


@contextmanager
def connect(path: str | Path | None = None, *, read_only: bool = False, wait_seconds: float = 120.0) -> Iterator[duckdb.DuckDBPyConnection]:
    """Open the catalogue (schema ensured when writable), yield, and always close.

    The embedded file at `path`, or the shared catalogue when HARVEST_CATALOGUE says so
    (:mod:`harvest_pipeline.store.backend`)."""
    from harvest_pipeline.store.schema import ensure_schema

    from harvest_pipeline.store.backend import catalogue_settings
    from harvest_pipeline.store.shared_instance import shared_cursor

    settings = catalogue_settings()
    if settings.shared:
        # A cursor of the process's one attach (store/shared_instance.py); local folders (staging,
        # spill, host locks) stay beside HARVEST_DUCKDB_PATH.
        with shared_cursor(settings, connection_config(path or default_db_path()), read_only=read_only) as con:
            yield con
        return
    con = open_catalogue(path or default_db_path(), read_only=read_only, wait_seconds=wait_seconds)
    try:
        if not read_only:
            ensure_schema(con)
        yield con
    finally:
        close_catalogue(path or default_db_path(), con)


def open_catalogue(path: str | Path, *, read_only: bool = False, wait_seconds: float = 120.0) -> duckdb.DuckDBPyConnection:
    """A connection to the embedded catalogue file, shared within this process; give it back with
    :func:`close_catalogue`. Every process that writes the catalogue should open it this way (the
    row group size is an option of the open, not of the file)."""
    return open_with_retry(path, read_only=read_only, wait_seconds=wait_seconds, shared=True)


def close_catalogue(path: str | Path, con: duckdb.DuckDBPyConnection) -> None:
    _SharedCatalogue.release(Path(path), con)


def remove_database_file(path: Path) -> None:
    """Delete a DuckDB file and its write-ahead log."""
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
