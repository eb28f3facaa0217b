"""A source's lock across machines: an advisory lock on the shared catalogue's PostgreSQL.

`harvest/source_lock.py` takes it, besides its local `flock`, when a shared catalogue is
configured, so a run on one machine waits for a run that holds the same source on another. It is
a session-level advisory lock held on a connection of its own for as long as the source is held;
PostgreSQL drops it when that connection ends, so a killed worker never keeps a source.
"""

from __future__ import annotations

import hashlib

from harvest_pipeline.errors import HarvestError
from harvest_pipeline.store.backend import redact_dsn


def source_lock_key(source_id: str) -> int:
    """The source's advisory lock key: 63 bits of a hash, in PostgreSQL's single-bigint key space
    (apart from the per-host politeness locks, which take two int4 keys)."""
    return int.from_bytes(hashlib.blake2b(("harvest-source:" + source_id).encode(), digest_size=8).digest(), "big") >> 1


class PostgresSourceLock:
    """One source's advisory lock, tried (never waited for inside PostgreSQL: the caller polls,
    so a stop request or its own timeout ends the wait)."""

    def __init__(self, dsn: str, source_id: str):
        self._dsn, self.source_id = dsn, source_id
        self._conn = None
        self.held = False

    def try_acquire(self) -> bool:
        """Take the lock if no other session holds it; True once held."""
        if self.held:
            return True
        import psycopg  # only workers on a shared catalogue need it

        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(self._dsn, autocommit=True, application_name="harvest-source-lock")
            self.held = bool(self._conn.execute(
                "SELECT pg_try_advisory_lock(%s)", (source_lock_key(self.source_id),)
            ).fetchone()[0])
        except psycopg.Error as exc:
            self.close()
            raise HarvestError(
                f"could not take the source's lock on the shared catalogue's PostgreSQL ({redact_dsn(str(exc)).strip()})",
                source_id=self.source_id,
                hint="check HARVEST_CATALOGUE_PG_DSN and that the database is reachable from this machine",
            ) from exc
        return self.held

    def close(self) -> None:
        """Release the lock (if held) and end the session; closing the session releases it anyway."""
        conn, self._conn, self.held = self._conn, None, False
        if conn is not None and not conn.closed:
            conn.close()
