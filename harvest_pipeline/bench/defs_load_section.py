"""--defs-load: what loading the definitions of many sources costs (every run process, code-server
start and reload pays it).

``--defs-sources`` N (default 200) sources, all pointing at one listening socket on 127.0.0.1 that
counts the connections it accepts and answers none (a server that would hang a load that asks it).
Half have stored server facts (daily partitions since 2007), a quarter a configured `start`, a
quarter nothing stored yet. Each of ``--defs-runs`` loads is a fresh process
``python -c "import harvest_pipeline.definitions"``; the baseline is a fresh ``python -c "import
dagster"`` measured in the same invocation, interleaved.

Targets: 0 connections per load; load time <= 2x the bare ``import dagster``.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from harvest_pipeline.bench.measure import Stats
from harvest_pipeline.bench.report import n2, table
from harvest_pipeline.bench.spec import child_env


class CountingListener:
    """A listening socket on 127.0.0.1 that counts the connections it accepts (and answers none:
    a server that would hang whatever asked it). The definitions tests use it too."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(200)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:
        return self.sock.getsockname()[1]

    def _loop(self):
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.accepted += 1
            conn.close()

    def close(self):
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _write_sources(folder: Path, n: int, port: int) -> Path:
    from harvest_pipeline.harvest.server_facts import ServerFacts, facts_identity, write_facts
    from harvest_pipeline.sources import SourceConfig

    lines = ["sources:"]
    db = folder / "data" / "harvest.duckdb"
    for i in range(n):
        sid = f"s{i:03d}"
        url = f"http://127.0.0.1:{port}/oai" if i % 4 else f"http://127.0.0.1:{port}/csw"
        protocol = "oai-pmh" if i % 4 else "csw"
        lines += [f"  - id: {sid}", f"    protocol: {protocol}", f"    url: {url}"]
        if i % 4 == 1:
            lines.append("    start: 2015-01-01")
        if i % 2 == 0:  # facts stored, as after `harvest-pipeline facts`
            source = SourceConfig(id=sid, protocol=protocol, url=url)
            write_facts(db, ServerFacts(
                source_id=sid, identity=facts_identity(source), granularity="YYYY-MM-DDThh:mm:ssZ",
                earliest_datestamp="2007-01-01T00:00:00Z", deleted_record="persistent" if i % 4 else "no",
                page_cap=None, partitions_start="2007-01-01T00:00:00+00:00", learned_at="2026-01-01T00:00:00+00:00",
                learned_by="bench",
            ))
    path = folder / "sources.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def _timed(code: str, env: dict, cwd: Path) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{code!r} failed: {(proc.stderr.strip().splitlines() or [''])[-1]}")
    return wall


def run(args, workdir: Path, *, log=print) -> dict:
    n, runs = args.defs_sources, args.defs_runs
    workdir.mkdir(parents=True, exist_ok=True)
    counter = CountingListener()
    try:
        sources = _write_sources(workdir, n, counter.port)
        env = child_env({"HARVEST_SOURCES_FILE": sources, "HARVEST_DUCKDB_PATH": workdir / "data" / "harvest.duckdb"})
        code = "import harvest_pipeline.definitions as d; assert len(d.defs.resolve_all_asset_keys()) > 0"
        log(f"defs-load: {n} sources, {runs} load(s) each way, interleaved")
        _timed("import dagster", env, workdir)  # warm the file cache once, unmeasured
        bare, loads, accepted = [], [], []
        for r in range(runs):
            bare.append(_timed("import dagster", env, workdir))
            before = counter.accepted
            loads.append(_timed(code, env, workdir))
            accepted.append(counter.accepted - before)
    finally:
        counter.close()
    b, lo = Stats.of(bare), Stats.of(loads)
    ratio = lo.median / b.median
    print()
    print(f"== Definitions of {n} sources: fresh process each, {runs} run(s) ==")
    print(table(["what", "s median", "min", "max", "connections per load"], [
        ["python -c 'import dagster'", n2(b.median), n2(b.min), n2(b.max), "-"],
        [f"import harvest_pipeline.definitions ({n} sources)", n2(lo.median), n2(lo.min), n2(lo.max),
         ",".join(str(a) for a in accepted)],
    ], right={1, 2, 3}))
    print(f"load / bare import dagster = {ratio:.2f}x (target <= 2x); connections: {sum(accepted)} in {runs} loads")
    return {
        "sources": n, "runs": runs, "bare_import_dagster": b.as_dict(),
        "load": lo.as_dict(), "ratio": ratio, "connections": accepted,
        "targets": [
            {"name": f"definitions of {n} sources: 0 HTTP requests per load", "verdict": "PASS" if not any(accepted) else "MISS",
             "numbers": f"{sum(accepted)} connections in {runs} loads"},
            {"name": "definitions load <= 2x a bare import dagster", "verdict": "PASS" if ratio <= 2 else "MISS",
             "numbers": f"{lo.median:.2f} s vs {b.median:.2f} s = {ratio:.2f}x"},
        ],
    }
