"""A throwaway PostgreSQL cluster on 127.0.0.1 in a temporary folder (benchmark and tests).

Needs Debian's `postgresql` package (initdb, pg_ctl). As root, the cluster runs as the `postgres`
user: initdb refuses root.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def pg_bindir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PgServer:
    port: int
    user: str = "harvest"

    def dsn(self, dbname: str = "postgres") -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname={dbname}"

    def create_database(self) -> str:
        import psycopg

        name = "h_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")
        return name


@contextmanager
def temporary_postgres(max_connections: int = 300) -> Iterator[PgServer]:
    bindir = pg_bindir()
    if bindir is None:
        raise RuntimeError("PostgreSQL is not installed: apt-get install -y postgresql (bash .ci/test-shared does it)")
    base = Path(tempfile.mkdtemp(prefix="harvest-pg-"))
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(base, "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = _free_port()
    data = base / "data"
    try:
        subprocess.run([*as_user, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "harvest",
                        "-E", "UTF8", "--no-sync"], check=True, capture_output=True)
        options = (f"-p {port} -k {base} -c listen_addresses=127.0.0.1 -c fsync=off"
                   f" -c max_connections={max_connections}")
        subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(base / "log"),
                        "-w", "start"], check=True, capture_output=True)
        yield PgServer(port)
    finally:
        if data.exists():
            subprocess.run([*as_user, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                           capture_output=True)
        shutil.rmtree(base, ignore_errors=True)
