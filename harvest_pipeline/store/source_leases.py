"""A source's lock across machines: an advisory lock on the shared catalogue's PostgreSQL.

`harvest/source_lock.py` takes it, after its local `flock`, when a shared catalogue is configured,
so a run on one machine waits for a run that holds the same source on another. The locks are
session-level advisory locks: PostgreSQL drops them when the session ends, so a killed worker
never keeps a source. A process holds all its sources' locks on one session (store/pg_session.py);
within the process the `flock` already lets one holder per source through, so the session never
takes a source twice (advisory locks are re-entrant within a session).
"""

from __future__ import annotations

import hashlib

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.store.backend import redact_dsn
from harvest_pipeline.store.pg_session import ProcessSession


def source_lock_key(source_id: str) -> int:
    """The source's advisory lock key: 63 bits of a hash, in PostgreSQL's single-bigint key space
    (apart from the per-host politeness locks, which take two int4 keys)."""
    return int.from_bytes(hashlib.blake2b(("harvest-source:" + source_id).encode(), digest_size=8).digest(), "big") >> 1


class PostgresSourceLock:
    """One source's advisory lock, tried (never waited for inside PostgreSQL: the caller polls,
    so a stop request or its own timeout ends the wait)."""

    def __init__(self, dsn: str, source_id: str):
        self._session, self.source_id = ProcessSession.of(dsn, "harvest-source-lock"), source_id
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lock if no other session holds it; True once held."""
        if self.held:
            return True
        import psycopg

        try:
            self.held = bool(self._session.execute("SELECT pg_try_advisory_lock(%s)", (source_lock_key(self.source_id),))[0])
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
            self._session.execute("SELECT pg_advisory_unlock(%s)", (source_lock_key(self.source_id),))
        except psycopg.Error:
            pass  # the session is gone, and its locks with it
