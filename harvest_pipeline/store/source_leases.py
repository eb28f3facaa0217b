"""A source's lock across machines: an advisory lock on the shared catalogue's PostgreSQL.

`harvest/source_lock.py` takes it, after its local `flock`, when a shared catalogue is configured,
so a run on one machine waits for a run that holds the same source on another. The locks are
session-level advisory locks: PostgreSQL drops them when the session ends, so a killed worker
never keeps a source. A process holds all its sources' locks on one session (a batch run holds a
hundred sources at once: a connection each would use up the server's connections); within the
process the `flock` already lets one holder per source through, so the session never takes a
source twice.
"""

from __future__ import annotations

import hashlib
import threading

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.store.backend import redact_dsn


def source_lock_key(source_id: str) -> int:
    """The source's advisory lock key: 63 bits of a hash, in PostgreSQL's single-bigint key space
    (apart from the per-host politeness locks, which take two int4 keys)."""
    return int.from_bytes(hashlib.blake2b(("harvest-source:" + source_id).encode(), digest_size=8).digest(), "big") >> 1


class _Session:
    """This process's session for source locks on one database, used by one thread at a time."""

    _sessions: dict[str, "_Session"] = {}
    _sessions_lock = threading.Lock()

    def __init__(self, dsn: str):
        self.dsn, self.lock, self.conn = dsn, threading.Lock(), None

    @classmethod
    def of(cls, dsn: str) -> "_Session":
        with cls._sessions_lock:
            return cls._sessions.setdefault(dsn, cls(dsn))

    def execute(self, sql: str, key: int) -> bool:
        import psycopg  # only workers on a shared catalogue need it

        with self.lock:
            if self.conn is None or self.conn.closed:
                self.conn = psycopg.connect(self.dsn, autocommit=True, application_name="harvest-source-lock")
            return bool(self.conn.execute(sql, (key,)).fetchone()[0])


class PostgresSourceLock:
    """One source's advisory lock, tried (never waited for inside PostgreSQL: the caller polls,
    so a stop request or its own timeout ends the wait)."""

    def __init__(self, dsn: str, source_id: str):
        self._session, self.source_id = _Session.of(dsn), source_id
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lock if no other session holds it; True once held."""
        if self.held:
            return True
        import psycopg

        try:
            self.held = self._session.execute("SELECT pg_try_advisory_lock(%s)", source_lock_key(self.source_id))
        except psycopg.Error as exc:
            raise HarvestError(
                f"could not take the source's lock on the shared catalogue's PostgreSQL ({redact_dsn(str(exc)).strip()})",
                source_id=self.source_id,
                hint="check HARVEST_CATALOGUE_PG_DSN and that the database is reachable from this machine",
            ) from exc
        return self.held

    def close(self) -> None:
        """Release the lock if held. A session that ended meanwhile has released it already."""
        if not self.held:
            return
        self.held = False
        import psycopg

        try:
            self._session.execute("SELECT pg_advisory_unlock(%s)", source_lock_key(self.source_id))
        except psycopg.Error:
            pass  # the session is gone, and its locks with it
