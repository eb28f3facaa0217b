"""Dagster's SQLite event log, with its connections kept open and WAL commits not fsynced each.

Every window of a batch run writes four events (its materialization and three check results).
Dagster's `SqliteEventLogStorage` creates a SQLAlchemy engine and opens a new SQLite connection
for each of the ~10 statements' transactions behind them, and every commit waits for an fsync:
about 60 ms per window on an idle 2-core machine, 220-260 ms at load 5, so 300 small windows
spent longer writing events than their servers took to answer (bench --many-sources).

This storage is the same files and schema (`$DAGSTER_HOME/history/runs/*.db`, so existing run
history stays readable and switching back is a one-line change in dagster.yaml) with three changes:
- one engine per shard, its connections pooled, instead of a new engine per transaction;
- a table found in the index shard is remembered: Dagster asks whether the asset-check table
  exists before storing each check result, each time through a new engine and connection (5% of
  a 100-source batch run's CPU, py-spy); so is a column of its asset-key table, which Dagster
  inspects before storing each materialization;
- `PRAGMA synchronous=NORMAL`: the event log is already in WAL mode, where NORMAL stays
  consistent and loses nothing when a process crashes; only an OS crash or power loss may roll
  back the last commits. The catalogue's ledger, not Dagster's events, decides what is harvested
  (see README "Known limitations");
- the storage id of each materialization this process stored is kept until asked for once
  (`take_stored_materialization`): a batch run's window check results must point at their
  window's materialization, which they otherwise read back from the index shard per window.
Measured with 100 windows x 4 events at load 5-6: 220-260 ms per window before, 14-26 ms after.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from typing import NamedTuple

import dagster as dg
from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

# The WAL journal Dagster sets on every shard; NORMAL is SQLite's recommended pairing with it.
SYNCHRONOUS = "NORMAL"
# Connections kept per shard: the index shard is shared by the run's events thread, the daemon's
# sensors and the webserver's queries in their own processes; within a process Dagster's own lock
# lets one transaction through at a time, so a small pool suffices.
POOL_SIZE = 2
# Shards whose engines stay open: the index and the runs being written or read now. A webserver
# reading the events of thousands of runs must not keep thousands of files open.
OPEN_SHARDS = 16
# Materializations remembered until their check results ask for them: a run's events thread asks
# right after storing each, so a few suffice; the bound keeps a process that never asks small.
REMEMBERED_MATERIALIZATIONS = 64


class StoredMaterialization(NamedTuple):
    """What a check evaluation needs to point at a stored materialization (as EventLogRecord has)."""

    storage_id: int
    run_id: str
    timestamp: float


class PooledSqliteEventLogStorage(SqliteEventLogStorage):
    """`SqliteEventLogStorage` with one pooled engine per shard and `synchronous=NORMAL`.

    Config (dagster.yaml): `base_dir`, optional; default `$DAGSTER_HOME/history/runs`, where
    Dagster's default SQLite storage keeps the same files.
    """

    def __init__(self, base_dir: str, inst_data=None):
        self._engines: OrderedDict = OrderedDict()  # shard -> engine, least recently used first
        self._engines_lock = threading.Lock()
        self._tables_found: set[str] = set()  # tables of the index shard known to exist
        self._asset_key_cols_found: set[str] = set()  # columns of its asset_keys table known to exist
        self._stored_materializations: OrderedDict = OrderedDict()  # (asset key, partition) -> StoredMaterialization
        self._stored_lock = threading.Lock()
        self._storing = threading.local()  # the materialization being stored by this thread, until it commits
        super().__init__(base_dir, inst_data=inst_data)

    def store_event(self, event) -> None:
        self._storing.materialization = None
        super().store_event(event)
        stored = self._storing.materialization
        if stored is not None:  # committed: remember it (an event whose storage failed raised above)
            self._storing.materialization = None
            key, value = stored
            with self._stored_lock:
                self._stored_materializations[key] = value
                self._stored_materializations.move_to_end(key)
                while len(self._stored_materializations) > REMEMBERED_MATERIALIZATIONS:
                    self._stored_materializations.popitem(last=False)

    def _store_asset_event(self, conn, event, event_id: int) -> None:
        super()._store_asset_event(conn, event, event_id)
        dagster_event = event.dagster_event
        if dagster_event is not None and dagster_event.is_step_materialization:
            self._storing.materialization = (
                (dagster_event.asset_key, dagster_event.partition),
                StoredMaterialization(storage_id=event_id, run_id=event.run_id, timestamp=event.timestamp),
            )

    def take_stored_materialization(self, asset_key: dg.AssetKey, partition: str | None) -> StoredMaterialization | None:
        """The latest materialization of (asset, partition) stored by this process, once; None when
        it was not stored here or was asked for already (then read it from the storage)."""
        with self._stored_lock:
            return self._stored_materializations.pop((asset_key, partition), None)

    def has_table(self, table_name: str) -> bool:
        # Tables are created by migrations and dropped only by wipe(): a "yes" stays true.
        if table_name in self._tables_found:
            return True
        found = super().has_table(table_name)
        if found:
            self._tables_found.add(table_name)
        return found

    def _has_asset_key_col_on_connection(self, conn, column_name: str) -> bool:
        # Asked before storing every materialization (a schema inspection each time); columns are
        # added by migrations and dropped only by wipe(), so a "yes" stays true as has_table's does.
        if column_name in self._asset_key_cols_found:
            return True
        found = super()._has_asset_key_col_on_connection(conn, column_name)
        if found:
            self._asset_key_cols_found.add(column_name)
        return found

    @classmethod
    def config_type(cls):
        return {"base_dir": dg.Field(dg.StringSource, is_required=False)}

    @classmethod
    def from_config_value(cls, inst_data, config_value):
        base_dir = (config_value or {}).get("base_dir")
        if not base_dir:
            home = os.environ.get("DAGSTER_HOME")
            if not home:
                raise dg.DagsterInvariantViolationError(
                    "PooledSqliteEventLogStorage needs `base_dir` in dagster.yaml or DAGSTER_HOME set:"
                    " set DAGSTER_HOME to the folder holding dagster.yaml"
                )
            base_dir = os.path.join(home, "history", "runs")
        return cls(base_dir, inst_data=inst_data)

    def _engine(self, shard: str):
        import sqlalchemy as db

        with self._engines_lock:
            engine = self._engines.get(shard)
            if engine is not None:
                self._engines.move_to_end(shard)
            else:
                engine = db.create_engine(
                    self.conn_string_for_shard(shard),
                    pool_size=POOL_SIZE,
                    max_overflow=8,  # Dagster's schema set-up opens a second connection inside one
                    pool_pre_ping=False,
                    # Pooled connections move between threads; Dagster's lock serializes their use.
                    connect_args={"timeout": 30, "check_same_thread": False},
                )
                db.event.listen(engine, "connect", _set_synchronous)
                self._engines[shard] = engine
                while len(self._engines) > OPEN_SHARDS:
                    _, oldest = self._engines.popitem(last=False)
                    oldest.dispose()  # only called under Dagster's lock: none of its connections is in use
            return engine

    @contextmanager
    def _connect(self, shard: str) -> Iterator:
        # Same as the parent's, except the engine is kept instead of created and disposed each time.
        with self._db_lock:
            engine = self._engine(shard)
            if shard not in self._initialized_dbs:
                self._initdb(engine)
                self._initialized_dbs.add(shard)
            with engine.connect() as conn:
                with conn.begin():
                    yield conn

    def delete_events(self, run_id: str) -> None:
        super().delete_events(run_id)
        # A deleted run is not read again: its pooled connections must not keep its shard open.
        with self._engines_lock:
            engine = self._engines.pop(run_id, None)
        if engine is not None:
            engine.dispose()

    def wipe(self) -> None:
        self._tables_found.clear()
        self._asset_key_cols_found.clear()
        self._dispose_engines()  # the shard files are deleted
        super().wipe()

    def dispose(self) -> None:
        super().dispose()
        self._dispose_engines()

    def _dispose_engines(self) -> None:
        with self._engines_lock:
            engines, self._engines = list(self._engines.values()), OrderedDict()
        for engine in engines:
            engine.dispose()


def _set_synchronous(dbapi_connection, _record) -> None:
    dbapi_connection.execute(f"PRAGMA synchronous={SYNCHRONOUS}")
