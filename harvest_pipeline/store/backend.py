"""Which catalogue a process writes: the embedded DuckDB file (default) or a shared one.

Chosen by environment variables, read here only (the Dagster resource passes the same values):

* ``HARVEST_CATALOGUE``: ``duckdb`` (default: the file at ``HARVEST_DUCKDB_PATH``), ``postgres``
  (the tables live in a PostgreSQL database, reached through DuckDB's postgres extension) or
  ``ducklake`` (DuckLake: its catalog in PostgreSQL, its data as Parquet under a data path).
* ``HARVEST_CATALOGUE_PG_DSN``: the PostgreSQL connection, libpq ``key=value`` or a
  ``postgresql://`` URI. It may carry a password: it is never logged, and errors show it redacted.
* ``HARVEST_DUCKLAKE_DATA_PATH``: DuckLake's Parquet folder (a local/shared folder or ``s3://``).

Either shared kind runs the same SQL as the file (every statement in this package), in a DuckDB
in-memory session with the shared catalogue attached as ``catalogue`` and made the default. The
extensions come from the ``duckdb-extension-*`` wheels (installed from their bundled file, never
downloaded), which exist for one duckdb version: that is why duckdb is pinned.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import re
import time
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import TypeVar

import duckdb

from harvest_pipeline.errors import HarvestError

EMBEDDED = "duckdb"
POSTGRES = "postgres"
DUCKLAKE = "ducklake"
KINDS = (EMBEDDED, POSTGRES, DUCKLAKE)
ATTACHED_AS = "catalogue"
ATTACH_TRIES = 8

_EXTENSION_PACKAGES = {
    "postgres_scanner": "duckdb_extension_postgres_scanner",
    "ducklake": "duckdb_extension_ducklake",
}


@dataclass(frozen=True)
class CatalogueSettings:
    kind: str = EMBEDDED
    pg_dsn: str | None = field(default=None, repr=False)  # may hold a password: never in a repr or traceback
    data_path: str | None = None

    @property
    def shared(self) -> bool:
        return self.kind != EMBEDDED

    def describe(self) -> str:
        """Where the catalogue is, for logs and errors (no password)."""
        if not self.shared:
            return "embedded DuckDB file"
        where = redact_dsn(self.pg_dsn or "")
        if self.kind == DUCKLAKE:
            return f"DuckLake (catalog {where}, data {self.data_path})"
        return f"PostgreSQL ({where})"


def catalogue_settings(env: dict[str, str] | None = None) -> CatalogueSettings:
    env = os.environ if env is None else env
    kind = (env.get("HARVEST_CATALOGUE") or EMBEDDED).strip().lower()
    if kind not in KINDS:
        raise HarvestError(
            f"HARVEST_CATALOGUE={kind!r} is not a catalogue kind",
            hint=f"use one of {', '.join(KINDS)} (unset means {EMBEDDED})",
        )
    settings = CatalogueSettings(kind, env.get("HARVEST_CATALOGUE_PG_DSN") or None, env.get("HARVEST_DUCKLAKE_DATA_PATH") or None)
    if settings.shared and not settings.pg_dsn:
        raise HarvestError(
            f"HARVEST_CATALOGUE={kind} needs HARVEST_CATALOGUE_PG_DSN",
            hint="set it to the PostgreSQL connection, e.g. 'host=db.example.org dbname=harvest user=harvest'",
        )
    if kind == DUCKLAKE and not settings.data_path:
        raise HarvestError(
            "HARVEST_CATALOGUE=ducklake needs HARVEST_DUCKLAKE_DATA_PATH",
            hint="set it to the folder (reachable by every worker) or s3:// URL for DuckLake's Parquet files",
        )
    return settings


_PASSWORD = re.compile(r"(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)", re.IGNORECASE)
_URI_PASSWORD = re.compile(r"(postgres(?:ql)?://[^:/@\s]*:)([^@\s]*)(@)", re.IGNORECASE)


def redact_dsn(text: str) -> str:
    """Text with every libpq/URI password replaced by ***."""
    text = _PASSWORD.sub(r"\1***", text)
    return _URI_PASSWORD.sub(r"\1***\3", text)


def bundled_extension(name: str) -> Path:
    """The extension file shipped in its PyPI wheel for the running duckdb version."""
    package = _EXTENSION_PACKAGES[name]
    spec = importlib.util.find_spec(package)
    want = f"extensions/v{duckdb.__version__}/{name}.duckdb_extension"
    if spec is None or not spec.submodule_search_locations:
        raise HarvestError(
            f"the DuckDB extension {name} is not installed (package {package.replace('_', '-')})",
            hint=f"install the project again (pip install -e .): it pins duckdb and {package.replace('_', '-')} together",
        )
    path = Path(list(spec.submodule_search_locations)[0]) / want
    if not path.exists():
        raise HarvestError(
            f"{package.replace('_', '-')} has no {want} for duckdb {duckdb.__version__}",
            hint="duckdb and the extension wheels must be the same version; install the project's pins",
        )
    return path


def _load(con: duckdb.DuckDBPyConnection, name: str) -> None:
    path = str(bundled_extension(name)).replace("'", "''")
    con.execute(f"INSTALL '{path}'")
    con.execute(f"LOAD {name}")


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def open_shared(settings: CatalogueSettings, config: dict, *, read_only: bool = False,
                pool: tuple[int, int] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB session with the shared catalogue attached as the default database.

    `pool`: (connections, seconds): the PostgreSQL connections the attached database lends its
    transactions at most, and how long a transaction waits for one (the postgres extension's
    pool; store/shared_instance.py)."""
    error: duckdb.Error | None = None
    for attempt in range(ATTACH_TRIES):
        con = duckdb.connect(":memory:", config=config)
        try:
            _load(con, "postgres_scanner")
            if pool is not None:
                connections, wait_seconds = pool
                con.execute(f"SET pg_pool_max_connections = {int(connections)}")
                con.execute("SET pg_pool_acquire_mode = 'wait'")
                con.execute(f"SET pg_pool_wait_timeout_millis = {int(wait_seconds * 1000)}")
            options = ["READ_ONLY"] if read_only else []
            if settings.kind == DUCKLAKE:
                _load(con, "ducklake")
                options.append(f"DATA_PATH {_quote(settings.data_path)}")
                target = f"ducklake:postgres:{settings.pg_dsn}"
            else:
                options.insert(0, "TYPE postgres")
                target = settings.pg_dsn
            con.execute(f"ATTACH {_quote(target)} AS {ATTACHED_AS} ({', '.join(options)})")
            con.execute(f"USE {ATTACHED_AS}")
            return con
        except duckdb.Error as exc:
            con.close()
            error = exc
            # Workers attaching a new DuckLake at the same moment race to create its metadata
            # tables; the losers find them made a moment later. A wrong DSN fails every try.
            if attempt + 1 < ATTACH_TRIES and not _is_auth_or_network(exc):
                time.sleep(0.1 * (attempt + 1) * (0.5 + random.random()))
                continue
            break
    raise HarvestError(
        f"could not open the shared catalogue, {settings.describe()}: {redact_dsn(str(error))}",
        hint="check HARVEST_CATALOGUE_PG_DSN (host, port, database, user), that PostgreSQL accepts this "
        "machine, and for DuckLake that HARVEST_DUCKLAKE_DATA_PATH is reachable",
    ) from None


def _is_auth_or_network(exc: duckdb.Error) -> bool:
    text = str(exc)
    return any(m in text for m in ("password authentication", "does not exist", "Connection refused",
                                   "could not translate host", "timeout expired", "no pg_hba.conf"))


# Each connection's kind, asked once: a connection's default database is chosen when it is opened
# (every USE of the project comes before the connection is handed out), and the catalogue writer
# asks before most of its statements, each a round trip for the GIL in a busy batch run.
_DIALECTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def dialect(con: duckdb.DuckDBPyConnection) -> str:
    """The kind of the connection's default database: duckdb, postgres or ducklake."""
    try:
        return _DIALECTS[con]
    except (KeyError, TypeError):  # TypeError: a connection-like object without weak references
        pass
    row = con.execute("SELECT type FROM duckdb_databases() WHERE database_name = current_database()").fetchone()
    kind = (row[0] if row else EMBEDDED).lower()
    kind = kind if kind in KINDS else EMBEDDED
    try:
        _DIALECTS[con] = kind
    except TypeError:
        pass
    return kind


_PRIMARY_KEY_LINE = re.compile(r",(\s*--[^\n]*)?\s*\n\s*PRIMARY KEY\s*\([^)]*\)")
_PRIMARY_KEY_COLUMN = re.compile(r"\s+PRIMARY KEY\b")
_COMPRESSION_CLAUSE = re.compile(r"\s+USING COMPRESSION\s+\w+", re.IGNORECASE)


def ddl_for(kind: str, sql: str) -> str:
    """A migration's DDL as the backend takes it.

    A column's fixed compression (columns.RAW_XML_COMPRESSION) is DuckDB's own file's: PostgreSQL
    and DuckLake store the column their way. DuckLake has no primary keys (nor indexes): the keys
    are dropped, and every write to a keyed table is an upsert on its key anyway (see ledger.py),
    so the meaning is kept.
    """
    if kind == EMBEDDED:
        return sql
    sql = _COMPRESSION_CLAUSE.sub("", sql)
    if kind != DUCKLAKE:
        return sql
    return _PRIMARY_KEY_COLUMN.sub("", _PRIMARY_KEY_LINE.sub(r"\1", sql))


# --- statements PostgreSQL runs itself -----------------------------------------------------------
# DuckDB's postgres extension reads an attached table by COPYing the rows that pass the filters it
# can push down, and it pushes `IN (list)` as the list's range: 150 random keys select the whole
# source. Lookups that must follow the window, not the catalogue, run in PostgreSQL itself, on its
# indexes (schema migration 7).


def pg_literal(value) -> str:
    """A value as a PostgreSQL literal, for a statement handed to PostgreSQL as text."""
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(int(value))
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, datetime):
        return f"'{value.isoformat(sep=' ')}'::timestamp"
    text = str(value).replace("'", "''")
    if "\\" in text:  # an escape string reads the same whatever standard_conforming_strings says
        return "E'" + text.replace("\\", "\\\\") + "'"
    return "'" + text + "'"


def pg_array(values, element_type: str) -> str:
    """A list of values as a PostgreSQL array literal of `element_type`."""
    return f"ARRAY[{', '.join(pg_literal(v) for v in values)}]::{element_type}[]"


def pg_rows(query: str) -> str:
    """A FROM item: `query` run by PostgreSQL on the attached catalogue (postgres_query)."""
    return f"postgres_query({_quote(ATTACHED_AS)}, {_quote(query)})"


def query_in_place(con: duckdb.DuckDBPyConnection, sql: str, params: list) -> duckdb.DuckDBPyConnection:
    """Run a read of the catalogue's own tables where it is cheap: in PostgreSQL itself, on its
    indexes, for a PostgreSQL catalogue (each `?` of `sql`, our own text, becomes its parameter's
    literal); as it is elsewhere."""
    if dialect(con) != POSTGRES:
        return con.execute(sql, params)
    return con.execute(f"SELECT * FROM {pg_rows(_inlined(sql, params))}")


@dataclass(frozen=True)
class Upsert:
    """An upsert of one row on its key, declared once and run as each catalogue runs it best.

    `row` is the SELECT list that names the row's values (`?` parameters) as the columns of
    `excluded`; `update` is the SET list for a stored key; `insert` maps each inserted column to
    its value (for a new key). See :func:`upsert_in_place`."""

    table: str
    row: str
    key: tuple[str, ...]
    update: str
    insert: dict[str, str]
    in_postgres: bool = True  # False: the text uses DuckDB's functions (date_diff); PostgreSQL gets DuckDB's MERGE
    usually_new: bool = False  # True: the key is usually not stored yet, so the embedded file tries the INSERT first

    @property
    def _on(self) -> str:
        return " AND ".join(f"{self.table}.{k} = excluded.{k}" for k in self.key)

    def merge_sql(self) -> str:
        return (f"MERGE INTO {self.table} USING (SELECT {self.row}) AS excluded ON {self._on}"
                f" WHEN MATCHED THEN UPDATE SET {self.update}"
                f" WHEN NOT MATCHED THEN INSERT ({', '.join(self.insert)}) VALUES ({', '.join(self.insert.values())})")

    def _excluded(self, rows: int) -> str:
        """The FROM item `excluded`: `rows` rows, each `row`'s parameters in turn."""
        return f"({' UNION ALL '.join(f'SELECT {self.row}' for _ in range(rows))}) AS excluded"

    def update_sql(self, rows: int = 1) -> str:
        return f"UPDATE {self.table} SET {self.update} FROM {self._excluded(rows)} WHERE {self._on}"

    def insert_sql(self, rows: int = 1) -> str:
        return (f"INSERT INTO {self.table} ({', '.join(self.insert)})"
                f" SELECT {', '.join(self.insert.values())} FROM {self._excluded(rows)}")

    def insert_new_sql(self, rows: int = 1) -> str:
        """The INSERT of the keys not stored yet; inserts nothing (and raises nothing) for a stored one."""
        return f"{self.insert_sql(rows)} WHERE NOT EXISTS (SELECT 1 FROM {self.table} WHERE {self._on})"


def copied(*columns: str) -> dict[str, str]:
    """An `Upsert.insert` that takes these columns as `excluded` has them."""
    return {c: f"excluded.{c}" for c in columns}


def upsert_in_place(con: duckdb.DuckDBPyConnection, upsert: Upsert, params: list) -> None:
    """Run `upsert` (its `row`'s parameters: `params`) in the caller's transaction.

    - PostgreSQL (15 or later, which has MERGE): a MERGE in PostgreSQL itself, on the table's
      primary key. DuckDB's MERGE into an attached PostgreSQL table copies its key columns to join them.
    - The embedded file: an UPDATE, then an INSERT if it changed no row (for an upsert whose key is
      `usually_new`, the INSERT of a key not stored first, then the UPDATE if it inserted none: a
      catch-up's new windows take one statement, not two). DuckDB 1.5's MERGE (and
      INSERT .. ON CONFLICT) holds about 0.9 MB per statement that inserts until the transaction
      ends: a batch run's catalogue writer, which puts a hundred windows' ledger rows in one
      transaction, ran out of its 128 MB and wrote the group again one by one. The two statements
      hold nothing on one DuckDB thread (as batch runs set it) and cost less CPU; on more threads
      the INSERT holds the same, but there a writer's groups are one source's few writes.
    - DuckLake (no keys), PostgreSQL before 15 and an upsert whose text is DuckDB's only: DuckDB's MERGE.
    """
    kind = dialect(con)
    if kind == POSTGRES and upsert.in_postgres and _has_merge(con):
        con.execute(pg_execute_sql(_inlined(upsert.merge_sql(), params)))
    elif kind == EMBEDDED and upsert.usually_new:
        (inserted,) = con.execute(upsert.insert_new_sql(), params).fetchone()
        if not inserted:
            con.execute(upsert.update_sql(), params)
    elif kind == EMBEDDED:
        (changed,) = con.execute(upsert.update_sql(), params).fetchone()
        if not changed:
            con.execute(upsert.insert_sql(), params)
    else:
        con.execute(upsert.merge_sql(), params)


def upsert_rows_in_place(con: duckdb.DuckDBPyConnection, upsert: Upsert, rows: list[list]) -> None:
    """`upsert` of several rows (each its `row`'s parameters) in the caller's transaction: as
    `upsert_in_place` row by row, except into the embedded file, where they go in two statements
    whatever their number (the stored keys updated, then the others inserted). The keys must
    differ (two rows of one new key would both be inserted, and the primary key refuses that)."""
    if len(rows) < 2 or dialect(con) != EMBEDDED:
        for params in rows:
            upsert_in_place(con, upsert, params)
        return
    params = [value for row in rows for value in row]
    con.execute(upsert.update_sql(len(rows)), params)
    con.execute(upsert.insert_new_sql(len(rows)), params)


def _inlined(sql: str, params: list) -> str:
    """`sql` (our own text) with each `?` replaced by its parameter's PostgreSQL literal."""
    pieces = sql.split("?")
    if len(pieces) != len(params) + 1:
        raise ValueError("one parameter per ? in the statement")
    return pieces[0] + "".join(pg_literal(p) + piece for p, piece in zip(params, pieces[1:]))


_MERGE_BY_SERVER: dict[str, bool] = {}  # the attached PostgreSQL (its connection string) -> has MERGE


def _has_merge(con: duckdb.DuckDBPyConnection) -> bool:
    (where,) = con.execute("SELECT path FROM duckdb_databases() WHERE database_name = ?", [ATTACHED_AS]).fetchone()
    known = _MERGE_BY_SERVER.get(where)
    if known is None:
        version_sql = pg_rows("SELECT current_setting('server_version_num')::int AS version")
        (version,) = con.execute(f"SELECT * FROM {version_sql}").fetchone()
        known = _MERGE_BY_SERVER[where] = int(version) >= 150000
    return known


def pg_execute_sql(*statements: str) -> str:
    """DuckDB statements that have PostgreSQL run `statements` as they are (DDL DuckDB cannot express)."""
    return "".join(f"CALL postgres_execute({_quote(ATTACHED_AS)}, {_quote(s)});\n" for s in statements)


# --- conflicts between writers ----------------------------------------------------------------
# PostgreSQL (repeatable read, as DuckDB's postgres extension runs transactions) refuses an update
# of a row another transaction changed since; DuckLake refuses at commit a transaction that writes
# a table another one deleted from since. Both are safe to run again from the start.
# A process's long-lived attach (store/shared_instance.py) whose cached table definition another
# worker's migration has changed since: the attach is replaced, and the write runs again on it.
STALE_DEFINITION_MARKER = "row field count is"
_CONFLICT_MARKERS = (
    "could not serialize access",
    "deadlock detected",
    "Transaction conflict",
    "duplicate key value violates unique constraint",
    "Failed to commit DuckLake transaction",
    STALE_DEFINITION_MARKER,
)

MAX_CONFLICT_RETRIES = 12
T = TypeVar("T")


def is_write_conflict(exc: BaseException) -> bool:
    return isinstance(exc, duckdb.Error) and any(m in str(exc) for m in _CONFLICT_MARKERS)


@dataclass
class ConflictLog:
    """What the retries of one process cost (read by the benchmark)."""

    conflicts: int = 0
    retried_seconds: float = 0.0


CONFLICTS = ConflictLog()


class WriteWorthRetrying(Exception):
    """A write that failed for a reason its next attempt avoids (the message says which); its
    cause is the error. `run_write` runs it again once."""


def noting_retries(body: Callable[[duckdb.DuckDBPyConnection], T], warnings: list[str]) -> Callable[[duckdb.DuckDBPyConnection], T]:
    """A merge's `body` for `run_write` that appends to `warnings` the line its report carries
    ("merged twice: <why>") for each attempt rolled back to be run again."""
    def attempt(con: duckdb.DuckDBPyConnection) -> T:
        try:
            return body(con)
        except WriteWorthRetrying as exc:
            warnings.append(f"merged twice: {exc}")
            raise
    return attempt


def run_write(
    connect: Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]],
    body: Callable[[duckdb.DuckDBPyConnection], T],
    *,
    what: str,
    log=None,
    sleep=time.sleep,
) -> T:
    """Run ``body`` in one catalogue transaction; run it again when it lost a write conflict, and
    once when it raised WriteWorthRetrying.

    Bounded (MAX_CONFLICT_RETRIES, jittered exponential backoff from 50 ms, capped at 2 s), and each
    retry is logged with what was being written. An embedded file never conflicts: one writer.
    """
    from harvest_pipeline.store.connection import transaction

    delay = 0.05
    conflicts = 0
    retried_once = False
    while True:
        started = time.monotonic()
        try:
            with connect() as con, transaction(con):
                return body(con)
        except WriteWorthRetrying as exc:
            if retried_once:
                raise (exc.__cause__ or exc) from None
            retried_once = True
            if log is not None:
                log.warning("%s: %s", what, exc)
            continue
        except duckdb.Error as exc:
            if not is_write_conflict(exc) or conflicts == MAX_CONFLICT_RETRIES:
                if is_write_conflict(exc):
                    raise HarvestError(
                        f"{what}: lost {conflicts + 1} write conflicts in a row on the shared catalogue: {exc}",
                        hint="too many writers on the same rows; run the window again (nothing was written)",
                    ) from exc
                raise
            conflicts += 1
            CONFLICTS.conflicts += 1
            CONFLICTS.retried_seconds += time.monotonic() - started
            pause = delay * (0.5 + random.random())
            if log is not None:
                log.warning("%s: write conflict on the shared catalogue (%s), retry %d in %.2f s",
                            what, str(exc).splitlines()[0][:200], conflicts, pause)
            sleep(pause)
            delay = min(delay * 2, 2.0)

