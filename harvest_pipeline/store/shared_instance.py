"""The shared catalogue opened once per process: one DuckDB instance, a cursor of it per use.

Opening the shared catalogue means a new DuckDB instance, loading the postgres (and ducklake)
extension and an ATTACH that reads PostgreSQL's catalog: about 110-140 ms and 165-190 ms of CPU.
A window opens the catalogue several times: a batch run of 100 sources opening it per use spent
296 s of CPU on 300 small windows, and its threads held up to 98 PostgreSQL connections at once,
at the edge of PostgreSQL's default 100 (README "Scaling out"). Here a process attaches once and
each use gets a cursor, its own transaction. DuckDB's postgres extension lends each transaction
a connection from the instance's pool, which holds at most `pool_connections()`: a transaction
that finds them all lent waits for one. A thread that uses the catalogue again while it holds a
cursor gets the same cursor (and transaction), so no thread waits for a second connection while
holding one.
"""

from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import duckdb

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.store.backend import ATTACHED_AS, STALE_DEFINITION_MARKER, CatalogueSettings, open_shared

POOL_ENV = "HARVEST_CATALOGUE_PG_CONNECTIONS"
DEFAULT_POOL_CONNECTIONS = 8
# How long a transaction waits for one of the pool's connections before it fails (a window's
# merge of a million records can hold one for minutes).
POOL_WAIT_SECONDS = 600


def pool_connections() -> int:
    """PostgreSQL connections one process's attach uses at most (HARVEST_CATALOGUE_PG_CONNECTIONS,
    default 8); the leases add one session each (store/pg_session.py)."""
    raw = os.environ.get(POOL_ENV) or str(DEFAULT_POOL_CONNECTIONS)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise HarvestError(f"{POOL_ENV}={raw!r} is not a number of connections",
                           hint=f"a whole number of at least 1 (unset means {DEFAULT_POOL_CONNECTIONS})")
    return value


class _Instance:
    def __init__(self, root: duckdb.DuckDBPyConnection):
        self.root = root
        self.out = 0  # cursors handed out
        self.stale = False  # a fatal error or a stale table definition: replaced, closed by its last cursor


_lock = threading.Lock()
_instances: dict[tuple, _Instance] = {}
_held = threading.local()  # key -> the cursor this thread holds


def _key(settings: CatalogueSettings, read_only: bool) -> tuple:
    return settings.kind, settings.pg_dsn, settings.data_path, read_only


def _open(settings: CatalogueSettings, config: dict, read_only: bool) -> _Instance:
    root = open_shared(settings, config, read_only=read_only, pool=(pool_connections(), POOL_WAIT_SECONDS))
    if not read_only:
        from harvest_pipeline.store.schema import ensure_schema

        try:
            ensure_schema(root)
            # Workers starting together on a fresh catalogue apply its migrations between them:
            # table definitions this attach read before another worker's migration are dropped.
            # Before any cursor is out: clearing the cache under a running statement can fail it.
            root.execute("CALL pg_clear_cache()")
        except BaseException:
            root.close()
            raise
    return _Instance(root)


@dataclass(frozen=True)
class SharedConnect:
    """The harvest core's `connect()` for a shared catalogue: a cursor of the process's attach.

    Equal for the same catalogue and settings (as the embedded session's bound `connection` is for
    its file), so a process's harvests find one catalogue writer (harvest/grouped_writes.py keys
    it by its connect())."""

    settings: CatalogueSettings
    config: tuple[tuple[str, object], ...]  # connection_config's items, hashable

    @classmethod
    def of(cls, settings: CatalogueSettings, config: dict) -> "SharedConnect":
        return cls(settings, tuple(sorted(config.items())))

    def __call__(self):
        return shared_cursor(self.settings, dict(self.config))


@contextmanager
def shared_cursor(settings: CatalogueSettings, config: dict, *,
                  read_only: bool = False) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor of this process's instance for `settings`, the catalogue its default database
    (a writable instance ensures the schema once, when it attaches)."""
    key = _key(settings, read_only)
    held = getattr(_held, "cursors", None)
    if held is None:
        held = _held.cursors = {}
    if key in held:
        yield held[key]  # the same thread again, inside its own use: the same cursor and transaction
        return
    with _lock:
        instance = _instances.get(key)
        if instance is None or instance.stale:
            instance = _instances[key] = _open(settings, config, read_only)
        instance.out += 1
    con = None
    try:
        con = instance.root.cursor()
        con.execute(f"USE {ATTACHED_AS}")
        held[key] = con
        yield con
    except duckdb.Error as exc:
        if isinstance(exc, duckdb.FatalException) or "invalidated" in str(exc) or STALE_DEFINITION_MARKER in str(exc):
            # DuckDB refuses every later statement of an invalidated instance; a stale table
            # definition stays cached: the next use attaches again.
            instance.stale = True
        raise
    finally:
        held.pop(key, None)
        if con is not None:
            con.close()
        with _lock:
            instance.out -= 1
            retired = instance.out == 0 and (instance.stale or _instances.get(key) is not instance)
            if retired and _instances.get(key) is instance:
                del _instances[key]
        if retired:
            instance.root.close()


def close_shared_instances() -> None:
    """Close every instance (the end of a run, a test); one with cursors out closes when the last
    comes back. Their pooled PostgreSQL connections end with them."""
    with _lock:
        instances = list(_instances.values())
        _instances.clear()
        idle = [i for i in instances if i.out == 0]
    for instance in idle:
        instance.root.close()
