"""--many-sources N: N latency-bound sources brought up to date at once by `dagster dev` alone.

One provider-farm process (``provider_farm``) serves N demo providers, source k on its own loopback
address (127.0.0.2, 127.0.0.3, ...; past 127.0.0.254, 127.0.1.1 and on), each with ``--many-days``
(3) closed daily windows of ``--many-records-per-day`` (100) records, page size
``--many-page-size`` (50), every OAI-PMH response delayed ``--many-delay-ms`` (2000 ms): the
servers, not the CPU, should be the limit. Per level of ``--many-max-runs`` (default ``shipped``:
the project's dagster.yaml as it is; a number overrides ``concurrency.runs.max_concurrent_runs`` in
the copy), on a fresh Dagster home and catalogue: write the sources file, store the server facts
(``harvest-pipeline facts``, with the delay off: a deployment stores them once, when a source is
added), switch the delay on, start ``dagster dev`` and wait (at most ``--many-timeout``) until
every window of every source is materialized and no run is in flight; then stop it and read the
ledger.

Server-bound time of one source = its ListRecords pages (ledger) x delay: what it cannot go
below with one request at a time. All sources served at once, the whole catalogue could be up to
date in that time, so the bar is records / (one source's server time); the ratio reported is the
aggregate records/s over that bar (= one source's server time / wall). Target >= 0.8. The wall
time runs from starting ``dagster dev`` to the end of the last run (Dagster's run record), not to
the poll that noticed it. Where it went (``wall_breakdown``): Dagster's start-up until the first
run, that run's launch, its start until each source's first request, the servers' busy span and
what followed the last response, from the run records and each provider's request counter.

Memory: the whole machine's used memory (MemTotal - MemAvailable, every 0.5 s) minus its value
just before ``dagster dev`` starts (other work on the machine moves it too: noisy), the summed RSS
of the ``dagster dev`` process tree (webserver, daemon, code server, run processes), the largest
run process, and the provider farm's RSS, reported separately. Target: machine peak <= 8 GB.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import ExitStack
from datetime import timedelta
from pathlib import Path

from harvest_pipeline.bench.daemon_section import _stop, create_instance_storage
from harvest_pipeline.bench.report import n1, n2, table
from harvest_pipeline.bench.spec import child_env, default_day, midnight, open_instance

ROOT = Path(__file__).resolve().parents[2]
FIRST_HOST = 2  # 127.0.0.1 stays free for everything else on the machine
TARGET_RATIO = 0.8
TARGET_MEMORY_GB = 8.0
SAMPLE_S = 0.5
PG_SAMPLE_S = 0.1


def _cpu_busy_s() -> float:
    """The whole machine's busy CPU seconds since boot (all cores; /proc/stat, idle and iowait
    left out)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")


def _process_cpu_s(pid: int) -> float | None:
    import psutil

    try:
        t = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return t.user + t.system


def _meminfo_used_mb() -> float:
    fields = {}
    with open("/proc/meminfo") as f:
        for line in f:
            key, _, rest = line.partition(":")
            fields[key] = int(rest.split()[0])  # kB
    return (fields["MemTotal"] - fields["MemAvailable"]) / 1024


class _Sampler(threading.Thread):
    """Samples machine memory and the process trees' RSS every SAMPLE_S until stopped."""

    def __init__(self, dev_pid: int, farm_pid: int, baseline_mb: float):
        super().__init__(daemon=True)
        self.dev_pid, self.farm_pid, self.baseline_mb = dev_pid, farm_pid, baseline_mb
        self.peak_used_mb = self.peak_tree_mb = self.peak_run_mb = self.peak_farm_mb = 0.0
        self.peak_runs = 0
        self.run_cpu_s: dict[int, float] = {}  # run process pid -> CPU seconds (user + system) last seen
        self.halt = threading.Event()

    def run(self) -> None:
        import psutil

        while not self.halt.wait(SAMPLE_S):
            self.peak_used_mb = max(self.peak_used_mb, _meminfo_used_mb() - self.baseline_mb)
            try:
                tree = [psutil.Process(self.dev_pid), *psutil.Process(self.dev_pid).children(recursive=True)]
            except psutil.Error:
                continue
            total = 0.0
            runs = 0
            for p in tree:
                try:
                    rss = p.memory_info().rss / (1 << 20)
                    total += rss
                    # A run process: the code server spawns it via multiprocessing (`spawn_main`);
                    # other launchers use `dagster api execute_run`.
                    cmd = " ".join(p.cmdline())
                    if "spawn_main" in cmd or "execute_run" in cmd:
                        runs += 1
                        self.peak_run_mb = max(self.peak_run_mb, rss)
                        cpu = p.cpu_times()
                        self.run_cpu_s[p.pid] = cpu.user + cpu.system
                except psutil.Error:
                    pass
            self.peak_tree_mb = max(self.peak_tree_mb, total)
            self.peak_runs = max(self.peak_runs, runs)
            try:
                self.peak_farm_mb = max(self.peak_farm_mb, psutil.Process(self.farm_pid).memory_info().rss / (1 << 20))
            except psutil.Error:
                pass


class _PgConnections(threading.Thread):
    """Counts the catalogue database's PostgreSQL sessions every PG_SAMPLE_S (itself left out):
    the peak in all and per application_name (the leases' sessions name themselves)."""

    def __init__(self, dsn: str, dbname: str):
        super().__init__(daemon=True)
        self.dsn, self.dbname = dsn, dbname
        self.peak = 0
        self.peak_by_app: dict[str, int] = {}
        self.refused = 0  # samples that could not connect (the server full)
        self.peak_detail: list = []
        self.halt = threading.Event()

    def run(self) -> None:
        import psycopg

        conn = None
        while not self.halt.wait(PG_SAMPLE_S):
            try:
                if conn is None:
                    conn = psycopg.connect(self.dsn, autocommit=True, application_name="bench-sampler")
                rows = conn.execute(
                    "SELECT coalesce(nullif(application_name, ''), '(unnamed)'), state, left(query, 60), count(*)"
                    " FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid() GROUP BY 1, 2, 3",
                    [self.dbname]).fetchall()
            except psycopg.Error:
                self.refused += 1
                conn = None
                continue
            total = sum(n for *_, n in rows)
            if total > self.peak:
                self.peak = total
                # What the sessions were doing at the peak: state and last statement.
                self.peak_detail = sorted(([app, state, query, n] for app, state, query, n in rows),
                                          key=lambda r: -r[3])[:10]
            by_app: dict[str, int] = {}
            for app, _state, _query, n in rows:
                by_app[app] = by_app.get(app, 0) + n
            for app, n in by_app.items():
                self.peak_by_app[app] = max(self.peak_by_app.get(app, 0), n)
        if conn is not None:
            conn.close()


def _start_farm(n: int, days: int, records_per_day: int, page_size: int, workdir: Path, log):
    day = default_day()
    cmd = [sys.executable, "-m", "harvest_pipeline.bench.provider_farm", "--count", str(n),
           "--first-host", str(FIRST_HOST), "--days", str(days), "--records-per-day", str(records_per_day),
           "--page-size", str(page_size), "--end-day", day.isoformat(),
           "--now", (midnight(day) + timedelta(days=1)).isoformat()]
    errf = open(workdir / "provider_farm.log", "wb")  # noqa: SIM115 - closed with the farm
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL, env=child_env(),
                            text=True, start_new_session=True)
    from harvest_pipeline.bench.provider_farm import READY_PREFIX

    line = proc.stdout.readline()  # the farm prints its ready line or exits
    if not line.startswith(READY_PREFIX):
        _stop(proc)
        errf.close()
        raise RuntimeError(f"the provider farm did not start: {(workdir / 'provider_farm.log').read_text()[-500:]}")
    urls = json.loads(line[len(READY_PREFIX):])["urls"]
    log(f"many: {n} demo providers in one process (pid {proc.pid}), {urls[0]} .. {urls[-1]}")
    first = (day - timedelta(days=days - 1)).isoformat()
    return proc, errf, urls, first


def _admin(url: str, method: str, path: str, data: dict | None = None) -> dict:
    base = url[: -len("/oai")]
    body = json.dumps(data).encode() if data is not None else None
    req = urllib.request.Request(base + path, data=body, method=method,
                                 headers={"Content-Type": "application/json"} if body else {})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


def _set_delay(urls: list[str], delay_ms: int) -> None:
    for url in urls:
        _admin(url, "POST", "/admin/options", {"slow_ms": delay_ms})


def _request_times(urls: list[str]) -> list[dict]:
    """Each provider's request counter: how many OAI requests since the delay was switched on, and
    when the first and the latest of them arrived (epoch seconds; empty when it cannot say)."""
    try:
        return [_admin(u, "GET", "/admin/faults") for u in urls]
    except Exception:  # noqa: BLE001 - a breakdown for the report only
        return []


def _total_requests(served: list[dict]) -> int | None:
    return sum(int(d.get("requests") or 0) for d in served) if served else None


def wall_breakdown(t0: float, runs: list[tuple[float, float | None, float | None]], served: list[dict],
                   delay_s: float) -> dict:
    """Where a catch-up's wall time went, from `dagster dev`'s start `t0`, the runs' (created,
    started, ended) times and what each server saw (requests, first/latest request times):
    Dagster's start-up until the sensor's first run, that run's launch, the run's start until each
    source's first request, the servers' busy span (the first request .. the last response, taken
    as the latest request + the delay) and what came after the last response until the last run
    ended. Also each source's own span (its first request .. its last response) and the share of
    it its server spent answering (requests x delay / span): whether the token loops keep their
    servers busy, apart from when each source began. Times in seconds; None where a part is unknown."""
    import statistics

    created = [c for c, _, _ in runs]
    started = [s for _, s, _ in runs if s]
    ended = [e for _, _, e in runs if e]
    firsts = [d["first_request_at"] for d in served if d.get("first_request_at")]
    lasts = [d["last_request_at"] + delay_s for d in served if d.get("last_request_at")]
    first_run_start = min(started) if started else None
    own = [(d["last_request_at"] + delay_s - d["first_request_at"], int(d.get("requests") or 0))
           for d in served if d.get("first_request_at") and d.get("last_request_at")]
    spans = [span for span, _ in own]
    out = {
        "dagster_start_s": (min(created) - t0) if created else None,
        "launch_s": (first_run_start - min(created)) if created and first_run_start else None,
        "to_first_request_median_s": (statistics.median(firsts) - first_run_start) if firsts and first_run_start else None,
        "to_first_request_max_s": (max(firsts) - first_run_start) if firsts and first_run_start else None,
        "servers_busy_s": (max(lasts) - min(firsts)) if firsts and lasts else None,
        "after_last_response_s": (max(ended) - max(lasts)) if ended and lasts else None,
        "requests_per_source_max": max((int(d.get("requests") or 0) for d in served), default=None),
        "source_span_median_s": statistics.median(spans) if spans else None,
        "source_span_max_s": max(spans) if spans else None,
        "source_busy_share_median": statistics.median(n * delay_s / span for span, n in own if span > 0) if own else None,
    }
    return out


def _dagster_yaml(home: Path, max_runs: str) -> int:
    """Copy the project's dagster.yaml into `home`, overriding max_concurrent_runs unless `shipped`."""
    text = (ROOT / "dagster.yaml").read_text()
    shipped = int(re.search(r"max_concurrent_runs:\s*(\d+)", text).group(1))
    if max_runs != "shipped":
        text = re.sub(r"max_concurrent_runs:\s*\d+", f"max_concurrent_runs: {int(max_runs)}", text)
    (home / "dagster.yaml").write_text(text)
    return shipped if max_runs == "shipped" else int(max_runs)


def _done(instance, ids: list[str], days: int) -> tuple[int, int, list]:
    """(sources with every window materialized, runs in flight, run records)."""
    import dagster as dg

    runs = instance.get_run_records()
    flying = sum(1 for r in runs if not r.dagster_run.is_finished)
    complete = 0
    if runs and not flying:  # the per-asset reads only once the queue is empty
        for sid in ids:
            recs = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(["harvest", sid])), limit=10_000).records
            complete += len({r.partition_key for r in recs}) >= days
    return complete, flying, runs


def _ledger(db: Path, pg_dsn: str | None = None) -> dict:
    """The ledger's counts, from the embedded file or (`pg_dsn`) the shared catalogue's tables; a
    psycopg connection answers `execute(sql).fetchall()` as DuckDB's does."""
    import duckdb

    if pg_dsn is not None:
        import psycopg

        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            return _ledger_of(conn)
    if not db.exists():
        return {"windows": 0, "verified": 0, "records": 0, "pages": {}}
    con = duckdb.connect(str(db), read_only=True)
    try:
        return _ledger_of(con)
    finally:
        con.close()


def _ledger_of(con) -> dict:
    statuses = dict(con.execute("SELECT status, count(*) FROM harvest_windows GROUP BY 1").fetchall())
    records = con.execute("SELECT coalesce(sum(received), 0) FROM harvest_windows").fetchone()[0]
    pages = dict(con.execute("SELECT source_id, coalesce(sum(pages), 0) FROM harvest_windows GROUP BY 1").fetchall())
    return {"windows": sum(statuses.values()), "verified": statuses.get("verified", 0), "statuses": statuses,
            "records": int(records), "pages": {k: int(v) for k, v in pages.items()}}


def run_level(args, max_runs: str, urls: list[str], first_day: str, farm, folder: Path, log, pg=None) -> dict:
    """One catch-up at one max_concurrent_runs; `pg` (bench/pg_cluster.PgServer): into a shared
    catalogue in a new database of that cluster, its sessions counted."""
    import dagster as dg

    n, days, delay_ms = len(urls), args.many_days, args.many_delay_ms
    folder.mkdir(parents=True, exist_ok=True)
    home = folder / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    limit = _dagster_yaml(home, max_runs)
    db = folder / "data" / "harvest.duckdb"
    ids = [f"many{k + 1:03d}" for k in range(n)]
    (folder / "sources.yaml").write_text("sources:\n" + "".join(
        f"  - id: {sid}\n    url: {url}\n    window: day\n    start: {first_day}\n" for sid, url in zip(ids, urls)))
    (folder / "workspace.yaml").write_text(
        "load_from:\n  - python_module:\n      module_name: harvest_pipeline.definitions\n"
        "      location_name: harvest_pipeline\n      working_directory: .\n")
    env = child_env({"HARVEST_SOURCES_FILE": folder / "sources.yaml", "HARVEST_DUCKDB_PATH": db,
                     "DAGSTER_HOME": home})
    pg_dsn = pg_db = None
    if pg is not None:
        pg_db = pg.create_database()
        pg_dsn = pg.dsn(pg_db)
        env.update({"HARVEST_CATALOGUE": "postgres", "HARVEST_CATALOGUE_PG_DSN": pg_dsn})
    else:
        env = {k: v for k, v in env.items() if not k.startswith("HARVEST_CATALOGUE")}
    _set_delay(urls, 0)
    facts = subprocess.run([sys.executable, "-m", "harvest_pipeline.cli", "facts"], cwd=folder, env=env,
                           capture_output=True, text=True, timeout=600)
    if facts.returncode != 0:
        raise RuntimeError(f"harvest-pipeline facts failed: {(facts.stdout + facts.stderr)[-800:]}")
    create_instance_storage(home)
    _set_delay(urls, delay_ms)
    requests0 = _total_requests(_request_times(urls))
    load0 = os.getloadavg()
    baseline = _meminfo_used_mb()
    log(f"many: {n} sources x {days} windows, {delay_ms} ms per response, max_concurrent_runs {limit}"
        f" ({max_runs}); load {load0[0]:.1f}")
    t0 = time.time()
    cpu0, farm_cpu0 = _cpu_busy_s(), _process_cpu_s(farm.pid)
    complete = flying = 0
    runs: list = []
    with open(folder / "dagster_dev.log", "wb") as logf:
        proc = subprocess.Popen(
            [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", "127.0.0.1", "-p", str(args.many_port)],
            cwd=folder, env=env, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)
        sampler = _Sampler(proc.pid, farm.pid, baseline)
        sampler.start()
        pg_sampler = _PgConnections(pg_dsn, pg_db) if pg_dsn else None
        if pg_sampler is not None:
            pg_sampler.start()
        try:
            with open_instance(home) as instance:
                deadline = t0 + args.many_timeout
                last_log = t0
                while time.time() < deadline:
                    time.sleep(2.0)
                    if proc.poll() is not None:
                        raise RuntimeError(f"dagster dev exited with {proc.returncode}; see {folder / 'dagster_dev.log'}")
                    complete, flying, runs = _done(instance, ids, days)
                    if complete >= n and not flying:
                        break
                    if time.time() - last_log > 30:
                        last_log = time.time()
                        log(f"  {time.time() - t0:.0f} s: {len(runs)} runs ({flying} in flight), {complete}/{n} sources done,"
                            f" machine +{sampler.peak_used_mb:,.0f} MB peak")
                starts = [r.create_timestamp.timestamp() for r in runs]
                run_times = [(r.create_timestamp.timestamp(), r.start_time, r.end_time) for r in runs]
                ends = [r.end_time for r in runs if r.end_time]
                # The loop looks every 2 s: a finished catch-up ended with its last run, up to 2 s
                # before the look that saw it.
                wall = (max(ends) if complete >= n and not flying and ends else time.time()) - t0
                # Read when the catch-up was seen done (up to 2 s after it was), before Dagster stops.
                cpu1, farm_cpu1 = _cpu_busy_s(), _process_cpu_s(farm.pid)
                statuses: dict = {}
                for r in runs:
                    statuses[r.dagster_run.status.value] = statuses.get(r.dagster_run.status.value, 0) + 1
        finally:
            sampler.halt.set()
            sampler.join(5)
            if pg_sampler is not None:
                pg_sampler.halt.set()
                pg_sampler.join(5)
            _stop(proc)
    load1 = os.getloadavg()
    served = _request_times(urls)
    requests = _total_requests(served)
    ledger = _ledger(db, pg_dsn)
    pages = sorted(ledger["pages"].values())
    one_source_s = (max(pages) if pages else 0) * delay_ms / 1000
    rate = ledger["records"] / wall if wall else 0.0
    bar = ledger["records"] / one_source_s if one_source_s else None
    return {
        "max_concurrent_runs": limit, "setting": max_runs, "sources": n, "days": days, "delay_ms": delay_ms,
        "wall_s": wall, "timed_out": complete < n or bool(flying), "sources_complete": complete,
        "runs": len(runs), "run_statuses": statuses,
        "runs_span_s": (max(ends) - min(starts)) if starts and ends else None,
        "windows_expected": n * days, "windows_verified": ledger["verified"], "ledger_statuses": ledger.get("statuses"),
        "records": ledger["records"], "pages_per_source_max": max(pages) if pages else 0,
        "pages_total": sum(pages), "oai_requests": (requests - requests0) if requests is not None and requests0 is not None else None,
        "one_source_server_s": one_source_s, "rate": rate, "server_bound_rate": bar,
        "ratio": rate / bar if bar else None,
        # The catch-up alone (first run created .. last run ended): `dagster dev`'s start-up is paid
        # once per deployment, not per catch-up.
        "runs_ratio": (one_source_s / ((max(ends) - min(starts)))) if starts and ends and one_source_s else None,
        "breakdown": wall_breakdown(t0, run_times, served, delay_ms / 1000) if runs else None,
        "machine_peak_mb": sampler.peak_used_mb, "baseline_used_mb": baseline,
        "harvester_tree_peak_mb": sampler.peak_tree_mb, "run_process_peak_mb": sampler.peak_run_mb,
        "run_processes_peak": sampler.peak_runs, "farm_peak_mb": sampler.peak_farm_mb,
        # CPU the run processes used (sampled every SAMPLE_S, so up to that much of each one's end
        # is missing): what the harvest costs the machine, whatever the load.
        "run_cpu_s": sum(sampler.run_cpu_s.values()),
        # The whole machine's CPU over the catch-up, and the share of it the provider farm took:
        # the stand-ins for remote servers compete for the same cores as the harvest.
        "machine_cpu_s": cpu1 - cpu0,
        "farm_cpu_s": (farm_cpu1 - farm_cpu0) if farm_cpu0 is not None and farm_cpu1 is not None else None,
        "load_before": load0, "load_after": load1,
        "catalogue": "postgres" if pg is not None else "duckdb",
        "pg_max_connections": getattr(args, "many_pg_max_connections", None) if pg is not None else None,
        "pg_sessions_peak": pg_sampler.peak if pg_sampler is not None else None,
        "pg_sessions_peak_by_app": pg_sampler.peak_by_app if pg_sampler is not None else None,
        "pg_samples_refused": pg_sampler.refused if pg_sampler is not None else None,
        "pg_sessions_at_peak": pg_sampler.peak_detail if pg_sampler is not None else None,
    }


def run(args, workdir: Path, *, log=print) -> dict:
    n = args.many
    workdir.mkdir(parents=True, exist_ok=True)
    levels = [x.strip() for x in str(args.many_max_runs).split(",") if x.strip()]
    out: dict = {"sources": n, "levels": []}
    farm, errf, urls, first_day = _start_farm(n, args.many_days, args.many_records_per_day, args.many_page_size,
                                              workdir, log)
    with ExitStack() as stack:
        stack.callback(errf.close)
        stack.callback(_stop, farm)
        pg = None
        if getattr(args, "many_catalogue", "duckdb") == "postgres":
            from harvest_pipeline.bench.pg_cluster import temporary_postgres

            pg = stack.enter_context(temporary_postgres(max_connections=args.many_pg_max_connections))
            log(f"many: shared catalogue in PostgreSQL on 127.0.0.1:{pg.port}, max_connections {args.many_pg_max_connections}")
        for k, setting in enumerate(levels):
            res = run_level(args, setting, urls, first_day, farm,
                            workdir / f"level{k}-{setting}", log, pg=pg)
            out["levels"].append(res)
            log(f"  max_concurrent_runs {res['max_concurrent_runs']}: {res['windows_verified']}/{res['windows_expected']}"
                f" windows verified in {res['wall_s']:.0f} s, ratio {n1(res['ratio'])}"
                + (f"; PostgreSQL sessions at most {res['pg_sessions_peak']} {res['pg_sessions_peak_by_app']}"
                   if res["pg_sessions_peak"] is not None else ""))
    _print(out, args)
    out["targets"] = _targets(out)
    return out


def _mb(v) -> str:
    return f"{v:,.0f}" if v is not None else "-"


def _print(out: dict, args) -> None:
    lv = out["levels"]
    if not lv:
        return
    first = lv[0]
    print()
    print(f"== {out['sources']} latency-bound sources at once through `dagster dev` (sensor on): {first['days']} daily"
          f" windows each, {args.many_records_per_day} records/day, page size {args.many_page_size},"
          f" {first['delay_ms']} ms per response ==")
    rows = []
    for r in lv:
        rows.append([
            f"{r['max_concurrent_runs']}" + (" (shipped)" if r["setting"] == "shipped" else ""),
            f"{r['windows_verified']} / {r['windows_expected']}" + (" TIMEOUT" if r["timed_out"] else ""),
            f"{r['records']:,}", f"{r['wall_s']:.0f}", n1(r["runs_span_s"]), f"{r['one_source_server_s']:.0f}",
            f"{r['rate']:.1f}", n1(r["server_bound_rate"]), f"{r['ratio']:.3f}" if r["ratio"] else "-",
            f"{r['runs_ratio']:.3f}" if r.get("runs_ratio") else "-",
            _mb(r["machine_peak_mb"]), _mb(r["harvester_tree_peak_mb"]), str(r["run_processes_peak"]),
            _mb(r["run_process_peak_mb"]), f"{r['run_cpu_s']:.1f}", n1(r.get("farm_cpu_s")),
            n1(r.get("machine_cpu_s")), _mb(r["farm_peak_mb"]),
            "{:.1f} / {:.1f}".format(r["load_before"][0], r["load_after"][0]),
        ])
    print(table(["max runs", "windows verified", "records", "wall s", "runs span s", "1 source server s",
                 "rec/s", "bar rec/s", "ratio", "runs ratio", "machine peak MB", "dagster tree MB", "run procs",
                 "run proc MB", "run CPU s", "farm CPU s", "machine CPU s", "farm MB", "load 1m before/after"], rows))
    print("1 source server s = the most ListRecords pages of one source (ledger) x delay: the wall time if every"
          " source were served at once; bar rec/s = all records / that; ratio = rec/s / bar (target >= 0.8), from"
          " starting `dagster dev` to the last run's end; runs ratio = the same over the catch-up alone (first run created .. last run ended).")
    print("machine peak MB = peak (MemTotal - MemAvailable) minus its value just before `dagster dev` started (other"
          " work on the machine moves it too); dagster tree = summed RSS of webserver, daemon, code server and run"
          " processes; run proc MB = largest run process; run CPU s = user + system CPU of the run processes;"
          " farm = the one process serving every demo provider.")
    for r in lv:
        b = r.get("breakdown")
        if b:
            print(f"where the wall time went (max runs {r['max_concurrent_runs']}): `dagster dev` start-up until the sensor's"
                  f" first run {n1(b['dagster_start_s'])} s; that run's launch {n1(b['launch_s'])} s; from its start to a"
                  f" source's first request {n1(b['to_first_request_median_s'])} s (median; last source"
                  f" {n1(b['to_first_request_max_s'])} s); the servers busy {n1(b['servers_busy_s'])} s (first request .. last"
                  f" response; one source's requests x delay: {_server_s(b, r)} s); after the last response"
                  f" {n1(b['after_last_response_s'])} s until the last run ended. Each source's own first request .. last"
                  f" response: median {n1(b.get('source_span_median_s'))} s, longest {n1(b.get('source_span_max_s'))} s; its"
                  f" server answering {_share(b.get('source_busy_share_median'))} of that time (median).")
    for r in lv:
        if r.get("pg_sessions_peak") is not None:
            apps = ", ".join(f"{app} {n}" for app, n in sorted(r["pg_sessions_peak_by_app"].items(), key=lambda kv: -kv[1]))
            print(f"shared catalogue (PostgreSQL, max_connections {r['pg_max_connections']}), max runs"
                  f" {r['max_concurrent_runs']}: at most {r['pg_sessions_peak']} sessions on its database at once"
                  f" (sampled every {PG_SAMPLE_S} s; peak per application_name: {apps or 'none'});"
                  f" {r['pg_samples_refused']} samples could not connect.")


def _share(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _server_s(breakdown: dict, level: dict) -> str:
    """The most requests one source was asked x the delay, as text ('-' when unknown)."""
    most = breakdown.get("requests_per_source_max")
    return "-" if most is None else f"{most} x {level['delay_ms'] / 1000:g} = {most * level['delay_ms'] / 1000:.0f}"


def _targets(out: dict) -> list[dict]:
    lv = [r for r in out["levels"] if r.get("ratio") is not None]
    if not lv:
        return [{"name": "many sources: aggregate >= 80% of server-bound", "verdict": "n/a", "numbers": "no level ran"}]
    shipped = next((r for r in lv if r["setting"] == "shipped"), lv[0])
    best = max(lv, key=lambda r: r["ratio"])
    ok = [r for r in lv if r["ratio"] >= TARGET_RATIO and r["windows_verified"] == r["windows_expected"]]

    def desc(r):
        return (f"{r['max_concurrent_runs']} runs: {r['rate']:.1f} rec/s vs bar {r['server_bound_rate']:.1f}"
                f" = {r['ratio']:.2f} ({r['wall_s']:.0f} s wall vs {r['one_source_server_s']:.0f} s;"
                f" catch-up alone {n1(r['runs_span_s'])} s = {n2(r.get('runs_ratio'))})")

    return [
        {"name": f"{out['sources']} sources via the daemon, shipped settings: >= 80% of server-bound",
         "verdict": "PASS" if shipped in ok else "MISS",
         "numbers": desc(shipped) + (f"; best level {desc(best)}" if best is not shipped else "")},
        {"name": f"{out['sources']} sources via the daemon: machine peak memory <= 8 GB",
         "verdict": "PASS" if max(r["machine_peak_mb"] for r in lv) <= TARGET_MEMORY_GB * 1024 else "MISS",
         "numbers": "; ".join(f"{r['max_concurrent_runs']} runs: {r['machine_peak_mb']:,.0f} MB"
                              f" (dagster tree {r['harvester_tree_peak_mb']:,.0f} MB)" for r in lv)},
    ]
