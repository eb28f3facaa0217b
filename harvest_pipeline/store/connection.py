"""Opening the DuckDB file, waiting politely when another process holds its lock.

DuckDB allows one writing process per file and even read-only opens fail while a writer holds
it, so every open retries with jittered backoff and then fails with a message saying who to wait for.
"""

from __future__ import annotations

import os
import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import duckdb

from harvest_pipeline.errors import HarvestError, StoreLockedError

DEFAULT_DB_PATH = "data/harvest.duckdb"
DEFAULT_MEMORY_LIMIT = "1GB"


def default_db_path() -> Path:
    return Path(os.environ.get("HARVEST_DUCKDB_PATH") or DEFAULT_DB_PATH)


def catalogue_exists(path: str | Path | None = None) -> bool:
    """Whether there is a catalogue to read: the file exists, or a shared catalogue is configured."""
    from harvest_pipeline.store.backend import catalogue_settings

    return catalogue_settings().shared or Path(path or default_db_path()).exists()


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
    return {
        "memory_limit": os.environ.get("HARVEST_DUCKDB_MEMORY_LIMIT") or DEFAULT_MEMORY_LIMIT,
        # One folder per process: DuckDB names its spill files the same in every process.
        "temp_directory": str(spill_root / str(os.getpid())),
        "preserve_insertion_order": False,
    }


def _is_same_process_conflict(exc: Exception) -> bool:
    # DuckDB keeps one database instance per file inside a process; an open whose configuration
    # (read_only included) differs from the connections already open there is refused at once.
    return "different configuration" in str(exc)


def _is_being_created(exc: Exception, path: Path) -> bool:
    # Another process is writing the file's first bytes right now (two runs on a fresh catalogue).
    return "not a valid DuckDB database file" in str(exc) and path.exists() and path.stat().st_size < 1 << 20


def open_with_retry(
    path: str | Path, *, read_only: bool = False, wait_seconds: float = 120.0, settings: dict | None = None
) -> duckdb.DuckDBPyConnection:
    """Connect, waiting for another process's lock; `settings` override :func:`connection_config`."""
    path = Path(path)
    if not read_only:
        path.parent.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + wait_seconds
    delay = 0.02
    while True:
        try:
            return duckdb.connect(str(path), read_only=read_only, config={**connection_config(path), **(settings or {})})
        except (duckdb.IOException, duckdb.ConnectionException, duckdb.InvalidInputException) as exc:
            if _is_being_created(exc, path) and time.monotonic() < deadline:
                time.sleep(0.05)
                continue
            if _is_same_process_conflict(exc):
                if read_only:
                    # This process already has the file open for writing (a sensor next to another
                    # in the code server): share that instance; the caller only reads.
                    try:
                        return duckdb.connect(str(path), read_only=False, config=connection_config(path))
                    except (duckdb.IOException, duckdb.ConnectionException, duckdb.InvalidInputException):
                        pass
                if time.monotonic() >= deadline:
                    raise StoreLockedError(
                        f"could not open {path}: {exc}",
                        hint=(
                            "this process already holds the file open "
                            f"{'for writing' if read_only else 'read-only'} (another thread: a sensor, a "
                            "resource) and DuckDB refuses a second configuration of one file in one process; "
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

    from harvest_pipeline.store.backend import catalogue_settings, open_shared

    settings = catalogue_settings()
    if settings.shared:
        # Local folders (staging, spill, host locks) stay beside HARVEST_DUCKDB_PATH.
        con = open_shared(settings, connection_config(path or default_db_path()), read_only=read_only)
    else:
        con = open_with_retry(path or default_db_path(), read_only=read_only, wait_seconds=wait_seconds)
    try:
        if not read_only:
            ensure_schema(con)
        yield con
    finally:
        con.close()


def remove_database_file(path: Path) -> None:
    """Delete a DuckDB file and its write-ahead log."""
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
