"""One PostgreSQL session per process and purpose, shared by its threads (the shared catalogue's
leases: per-host politeness in host_leases.py, sources in source_leases.py).

A batch run works for a hundred sources at once: a connection per thread or per held lease would
use up PostgreSQL's default 100 connections. Session advisory locks taken here live as long as the
session; PostgreSQL drops them when it ends (a killed worker frees what it held).
"""

from __future__ import annotations

import threading


class ProcessSession:
    """An autocommit session opened on first use, one statement at a time, opened again after it
    was lost (the advisory locks it held went with it)."""

    _sessions: dict[tuple[str, str], "ProcessSession"] = {}
    _sessions_lock = threading.Lock()

    def __init__(self, dsn: str, application_name: str, setup: str | None = None):
        self._dsn, self._application_name, self._setup = dsn, application_name, setup
        self._lock = threading.Lock()
        self._conn = None

    @classmethod
    def of(cls, dsn: str, application_name: str, setup: str | None = None) -> "ProcessSession":
        """The process's session for this database and purpose (`setup` runs on each new connection)."""
        with cls._sessions_lock:
            return cls._sessions.setdefault((dsn, application_name), cls(dsn, application_name, setup))

    def execute(self, sql: str, params: tuple) -> tuple | None:
        """Run one statement; its first row (None when it returns none)."""
        import psycopg  # only workers on a shared catalogue need it

        with self._lock:
            if self._conn is None or self._conn.closed:
                conn = psycopg.connect(self._dsn, autocommit=True, application_name=self._application_name)
                if self._setup:
                    # CREATE ... IF NOT EXISTS is not safe against a concurrent one (the loser gets
                    # "type ... already exists"): workers starting together take turns. Slot -1
                    # of a two-key lock: no host slot (0 and up) or source lease (one key) is it.
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s), -1)", (self._setup,))
                        conn.execute(self._setup)
                self._conn = conn
            try:
                cur = self._conn.execute(sql, params)
            except psycopg.OperationalError:
                self._conn.close()  # the session is gone: the next statement opens another
                raise
            return cur.fetchone() if cur.description is not None else None
