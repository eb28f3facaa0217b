"""A source's lock on one machine: one holder at a time per source, waits that end, a holder's
death frees it (harvest/source_lock.py). Across machines: shared/test_source_lock_shared.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from harvest_pipeline.harvest.source_lock import SourceLock

ROOT = Path(__file__).resolve().parents[2]

HOLDER = textwrap.dedent("""
    import sys, time
    from harvest_pipeline.harvest.source_lock import SourceLock
    lock = SourceLock(sys.argv[1], sys.argv[2])
    assert lock.acquire(timeout=10)
    print("held", flush=True)
    time.sleep(60)
""")


def hold_in_child(db_path: Path, source_id: str, env: dict | None = None) -> subprocess.Popen:
    """A process that takes the source's lock and keeps it until killed."""
    child = subprocess.Popen([sys.executable, "-c", HOLDER, str(db_path), source_id], stdout=subprocess.PIPE,
                             env={**os.environ, **(env or {}), "PYTHONPATH": str(ROOT)}, text=True)
    assert child.stdout.readline().strip() == "held"
    return child


def test_a_source_has_one_holder_and_other_sources_are_free(tmp_path):
    db = tmp_path / "harvest.duckdb"
    first, second, other = SourceLock(db, "a"), SourceLock(db, "a"), SourceLock(db, "b")
    waits = []
    assert first.acquire(timeout=1)
    assert not second.acquire(timeout=0.6, on_wait=lambda: waits.append(1))
    assert waits == [1]  # told once that it waits
    assert other.acquire(timeout=1)
    first.release()
    assert second.acquire(timeout=1)
    second.release()
    other.release()


def test_a_killed_holder_frees_the_source(tmp_path):
    db = tmp_path / "harvest.duckdb"
    child = hold_in_child(db, "a")
    lock = SourceLock(db, "a")
    try:
        assert not lock.acquire(timeout=0.5)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    assert lock.acquire(timeout=5)
    lock.release()
