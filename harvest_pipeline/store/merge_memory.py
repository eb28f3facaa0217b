"""The DuckDB settings of a large window's merge: one thread, and the whole memory limit while it
classifies, a lower one while it fingerprints stored versions and while it writes; the instance's
own settings back when it ends.

Each thread's operators hold their own buffers: at the 128 MB limit a 1,000,000-record merge ran
out of memory with two threads, not with one (bench --rss). A small window keeps them all: its
lookup of the catalogue's keys is a scan that threads share.

A large window's classification (`classified`: a hash join over the whole window) needs the
limit: at 1,000,000 records it ran out of memory below 128 MB. Its writes do not, but DuckDB's
buffer pool fills up to the limit with the rows written (blocks it keeps because nothing asks it
to let them go), and that was the window harvest's peak. So the writes of a window of new rows
run at WRITE_SHARE of the limit (updating stored rows in place needs the whole of it: merge.py
calls `writing` only for a window that updates none): at the default 128 MB, 64 MB (80 MB until
the twenty-sixth round: a first harvest of 100,000 records peaked 15-19 MB lower at 64, of 20,000
records 13 MB lower, for about 2-3% of its speed; bench/ROUNDS.md). A window harvest first peaked
at 392 MB instead of 433 MB (100,000 records) and 417 MB instead of 467-478 MB (1,000,000), where
the classification sets the peak (bench --rss).

The settings belong to the DuckDB instance, which merges of one process share (a batch run merges two
windows at once on cursors of its catalogue): the limit is lowered only while no large merge of
this process is still classifying, and a merge that starts classifying raises it again first.
The settings go through a cursor of their own, so a refused change (DuckDB could not let enough
go) leaves the merge's transaction alone: the writes then run at the whole limit.

The lower limit is a saving, not a bound the merge needs: a 100,000-record window's writes ran out
of memory at it now and then (2 of about 65 runs of one harvest, "Thirteenth round" in
bench/ROUNDS.md). When they do, `ran_out_lowered` says the merge is worth running again and this process
writes at the whole limit from then on.
"""

from __future__ import annotations

import logging
import re
import threading

import duckdb

from harvest_pipeline.store.connection import configured_memory_limit

log = logging.getLogger(__name__)

# The share of the memory limit a large window's writes run at (64 MB of the default 128 MB; 48 MB
# ran out of memory at 1,000,000 records, 64 MB did not, bench --rss).
WRITE_SHARE = 0.5
# Never lower below this: a limit already this small is left whole.
WRITE_FLOOR_BYTES = 64 * 1000 * 1000
# The share its fingerprint statements run at (64 MB of 128 MB): the md5 over the stored versions'
# XML filled the pool to the limit and set the peak of a window merged again (32 MB ran out of
# memory at 100,000 records; bench/ROUNDS.md "Twenty-fifth round").
FINGERPRINT_SHARE = 0.5
FINGERPRINT_FLOOR_BYTES = 48 * 1000 * 1000

_lock = threading.Lock()
_merges: dict[int, str] = {}  # id(connection) of this process's large merges -> "classifying" | "fingerprinting" | "writing"
_threads_before: list[int] = []  # the instance's threads before the first of its running large merges
_lowered = False  # the instance's limit is the lower one now
_lowering_off = False  # writes at the lower limit ran out of memory in this process: no more lowering

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}


def _bytes(limit: str) -> int | None:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", limit.lower())
    if not m or m.group(2) not in _UNITS:
        return None  # a form this module does not read (DuckDB's percentages): left whole
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def write_limit(limit: str) -> str | None:
    """The limit a large window's writes run at, or None to leave `limit` as it is."""
    return _share(limit, WRITE_SHARE, WRITE_FLOOR_BYTES)


def fingerprint_limit(limit: str) -> str | None:
    """The limit a large window's fingerprint statements run at, or None to leave `limit` as it is."""
    return _share(limit, FINGERPRINT_SHARE, FINGERPRINT_FLOOR_BYTES)


def _share(limit: str, share: float, floor: int) -> str | None:
    full = _bytes(limit)
    if full is None or full * share < floor:
        return None
    return f"{int(full * share) // 1000}KB"


def _set(con: duckdb.DuckDBPyConnection, limit: str) -> bool:
    try:
        with con.cursor() as setting:
            setting.execute(f"SET memory_limit = '{limit}'")
        return True
    except duckdb.Error as exc:  # DuckDB could not let enough go: the merge goes on at the limit it has
        log.debug("memory_limit stays: SET memory_limit = '%s' failed: %s", limit, exc)
        return False


def classifying(con: duckdb.DuckDBPyConnection) -> None:
    """A large window's merge begins: one thread, and the whole limit until it writes (call `done`
    at its end)."""
    with _lock:
        with con.cursor() as setting:
            if not _merges:
                _threads_before[:] = [setting.execute("SELECT current_setting('threads')").fetchone()[0]]
            setting.execute("SET threads = 1")
        _merges[id(con)] = "classifying"
        _whole(con)


def writing(con: duckdb.DuckDBPyConnection) -> None:
    """Its classification is done: lower the limit if no other large merge still classifies."""
    global _lowered
    with _lock:
        if id(con) not in _merges:
            return
        _merges[id(con)] = "writing"
        lower = write_limit(configured_memory_limit())
        if lower is not None and not _lowering_off and "classifying" not in _merges.values() and _set(con, lower):
            _lowered = True


def fingerprinting(con: duckdb.DuckDBPyConnection) -> None:
    """Its fingerprint statements begin: a lower limit if it is this process's only large merge
    (call `fingerprinted` after them)."""
    global _lowered
    with _lock:
        if _merges.get(id(con)) != "classifying":
            return
        _merges[id(con)] = "fingerprinting"
        lower = fingerprint_limit(configured_memory_limit())
        if lower is not None and not _lowering_off and len(_merges) == 1 and _set(con, lower):
            _lowered = True


def fingerprinted(con: duckdb.DuckDBPyConnection) -> None:
    """Its fingerprints are taken: the whole limit again for the rest of its classification."""
    with _lock:
        if _merges.get(id(con)) != "fingerprinting":
            return
        _merges[id(con)] = "classifying"
        _whole(con)


def ran_out_lowered(con: duckdb.DuckDBPyConnection) -> bool:
    """A large merge on `con` ran out of memory: True if it ran at a lower limit (its fingerprints
    or its writes: worth running again, at the whole limit: this process stops lowering it)."""
    global _lowering_off
    with _lock:
        if _merges.get(id(con)) not in ("writing", "fingerprinting") or not _lowered:
            return False
        _lowering_off = True
        return True


def done(con: duckdb.DuckDBPyConnection) -> None:
    """The merge ended (written or failed): the whole limit again unless another merge writes, and
    the instance's threads once no large merge is left."""
    with _lock:
        if _merges.pop(id(con), None) is None:
            return
        if "writing" not in _merges.values() or _lowering_off:
            _whole(con)
        if not _merges and _threads_before:
            with con.cursor() as setting:
                setting.execute(f"SET threads = {int(_threads_before.pop())}")


def _whole(con: duckdb.DuckDBPyConnection) -> None:
    global _lowered
    if _set(con, configured_memory_limit()):
        _lowered = False
