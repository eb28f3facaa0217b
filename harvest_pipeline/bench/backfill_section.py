"""--backfill: wall time of a backfill of D daily windows (default 365), two ways.

One demo provider serves a corpus of D days (``--backfill-records-per-day``, default 150, the
demo's own density), clock frozen at today 00:00 UTC, so every window is closed. Each mode starts
from an empty catalogue and an empty Dagster home:

  cli     what a user runs: ``harvest-pipeline harvest bench --from FIRST --until LAST`` as a
          subprocess, with HARVEST_SOURCES_FILE / HARVEST_DUCKDB_PATH / DAGSTER_HOME pointing at
          temp files: ranged runs of ``windows_per_run`` windows (``--backfill-windows-per-run``,
          default the source default 30) on a persistent (sqlite) instance, every window with its
          own materialization and check results per partition (counted afterwards).
  direct  ``harvest_window`` per window in one process, no Dagster: the floor.

Targets: 365 windows < 5 min through the CLI; CLI wall time <= 1.2x the direct loop.

Per-window overhead = (wall - sum of harvest_window's own seconds from the ledger) / windows.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

from harvest_pipeline.bench.measure import Stats
from harvest_pipeline.bench.report import n1, n2, table
from harvest_pipeline.bench.run_one import RESULT_PREFIX
from harvest_pipeline.bench.spec import BenchSpec, bench_provider, child_env, open_instance

TARGET_SECONDS = 300.0
_WINDOW_LINE = re.compile(r"^\[\d+/\d+\] ")


def ledger_totals(db: Path, source_id: str) -> dict:
    """Windows, statuses, records and harvest seconds from the catalogue's ledger."""
    import duckdb

    if not db.exists():
        return {"windows": 0}
    con = duckdb.connect(str(db), read_only=True)
    try:
        cols = {r[0] for r in con.execute("DESCRIBE harvest_windows").fetchall()}
        secs = "sum(seconds)" if "seconds" in cols else "sum(epoch(finished_at) - epoch(started_at))"
        row = con.execute(
            f"""SELECT count(*), count(*) FILTER (WHERE status IN ('verified', 'unproven')),
                       coalesce(sum(received), 0), coalesce({secs}, 0)
                FROM harvest_windows WHERE source_id = ?""", [source_id]).fetchone()
        statuses = dict(con.execute("SELECT status, count(*) FROM harvest_windows WHERE source_id = ? GROUP BY 1",
                                    [source_id]).fetchall())
    finally:
        con.close()
    return {"windows": row[0], "passed": row[1], "records": int(row[2]), "harvest_s": float(row[3]),
            "statuses": statuses}


def _sources_yaml(spec: BenchSpec, first_day: str, windows_per_run: int | None) -> str:
    per_run = f"    windows_per_run: {windows_per_run}\n" if windows_per_run else ""
    return (f"sources:\n  - id: {spec.source_id}\n    url: {spec.url}\n    metadata_prefix: {spec.metadata_prefix}\n"
            f"    window: day\n    start: {first_day}\n{per_run}")


def dagster_records(home: Path, source_id: str) -> dict:
    """Partitions with a materialization, and with all three check results, in the instance."""
    import dagster as dg

    from harvest_pipeline.defs.checks import CHECK_DESCRIPTIONS

    key = dg.AssetKey(["harvest", source_id])
    with open_instance(home) as instance:
        mats = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=10_000).records
        checked = None
        for name in CHECK_DESCRIPTIONS:
            infos = instance.event_log_storage.get_asset_check_partition_info([dg.AssetCheckKey(key, name)])
            done = {i.partition_key for i in infos if i.partition_key is not None
                    and i.latest_execution_status.value in ("SUCCEEDED", "FAILED")}
            checked = done if checked is None else checked & done
        runs = len(instance.get_runs())
    return {"materialized": len({r.partition_key for r in mats}), "checked": len(checked or ()), "runs": runs}


def run_cli(spec: BenchSpec, first_day: str, last_day: str, folder: Path, timeout: float,
            windows_per_run: int | None = None) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    sources = folder / "sources.yaml"
    sources.write_text(_sources_yaml(spec, first_day, windows_per_run))
    db = folder / "data" / "harvest.duckdb"
    env = child_env({"HARVEST_SOURCES_FILE": sources, "HARVEST_DUCKDB_PATH": db,
                     "DAGSTER_HOME": folder / "dagster_home"})
    cmd = [sys.executable, "-m", "harvest_pipeline.cli", "harvest", spec.source_id, "--from", first_day,
           "--until", last_day]
    stderr_path = folder / "cli.stderr.log"
    t = time.perf_counter()
    # cwd = the scratch folder: the CLI copies ./dagster.yaml into DAGSTER_HOME when present; here it
    # writes a minimal one, and nothing lands in the project's data/.
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=subprocess.PIPE, stderr=err, text=True,
                                stdin=subprocess.DEVNULL)
        lines, window_times = [], []
        deadline = time.monotonic() + timeout
        for line in proc.stdout:  # one line per finished window: timestamp them as they come
            lines.append(line.rstrip("\n"))
            if _WINDOW_LINE.match(line):
                window_times.append(time.perf_counter() - t)
            if time.monotonic() > deadline:
                proc.kill()
                break
        proc.wait()
    wall = time.perf_counter() - t
    (folder / "cli.log").write_text("\n".join(lines) + "\n")
    out = {"mode": "cli", "wall_s": wall, "exit": proc.returncode, "command": " ".join(cmd[1:]),
           "summary": (lines or [""])[-1]}
    if window_times:
        # Start-up (imports, definitions, instance) until the first run's lines, then steady state.
        out["first_window_s"] = window_times[0]
        if len(window_times) > 1:
            out["steady_s_per_window"] = (window_times[-1] - window_times[0]) / (len(window_times) - 1)
    out.update(ledger_totals(db, spec.source_id))
    try:
        out.update(dagster_records(folder / "dagster_home", spec.source_id))
    except Exception as exc:  # noqa: BLE001 - the counts are a check, not the measurement
        out["dagster_records_error"] = str(exc)
    if proc.returncode not in (0, 1):
        tail = [s for s in stderr_path.read_text(errors="replace").splitlines() if s.strip()]
        out["error"] = f"exit {proc.returncode}: {tail[-1] if tail else ''}"
    return out


def run_child_mode(mode: str, spec_file: Path, folder: Path, timeout: float) -> dict:
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "harvest_pipeline.bench.backfill_runner", mode, "--spec", str(spec_file),
           "--workdir", str(folder)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=child_env(), capture_output=True, text=True, timeout=timeout, check=False)
    wall = time.perf_counter() - t
    (folder / "runner.log").write_text(proc.stdout + "\n--- stderr ---\n" + proc.stderr)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith(RESULT_PREFIX):
            out = json.loads(line[len(RESULT_PREFIX):])
            out["process_wall_s"] = wall
            return out
    tail = (proc.stderr.strip().splitlines() or [""])[-1]
    return {"mode": mode, "error": f"exit {proc.returncode}: {tail}", "wall_s": wall}


def run(args, workdir: Path, *, log=print) -> dict:
    days, rpd = args.backfill_days, args.backfill_records_per_day
    modes = [m.strip() for m in str(args.backfill_modes).split(",") if m.strip()]
    per_run = getattr(args, "backfill_windows_per_run", None)
    runs = getattr(args, "backfill_runs", None) or 1
    workdir.mkdir(parents=True, exist_ok=True)
    out: dict = {"days": days, "records_per_day": rpd, "runs": runs, "modes": {}}
    log(f"backfill: {days} daily windows x {rpd} records/day; modes {', '.join(modes)}")
    with bench_provider(records_per_day=rpd, page_size=args.page_size, days=days, workdir=workdir) as (provider, spec):
        first = (spec.start - timedelta(days=days - 1)).date().isoformat()
        last = spec.window_key
        spec.extra = {"first_day": first, "last_day": last}
        spec_file = spec.write(workdir / "spec.json")
        try:
            total = provider.stats(from_=f"{first}T00:00:00Z", until=spec.until_param)["total"]
        except Exception:  # noqa: BLE001
            total = None
        out["expected_records"] = total
        rows = []
        plan = []
        for mode in modes:
            if mode not in ("cli", "direct"):
                raise ValueError(f"unknown backfill mode {mode!r} (cli, direct)")
            plan.append((mode, mode, 0))
        for label, mode, n in plan:
            results = []
            for r in range(runs):
                folder = workdir / f"{label.replace(' ', '_').replace('=', '')}-{r}"
                log(f"  {label} run {r + 1}/{runs} ...")
                if mode == "cli":
                    res = run_cli(spec, first, last, folder, args.timeout, per_run)
                else:
                    res = run_child_mode(mode, spec_file, folder, args.timeout)
                results.append(res)
                log(f"  {label}: " + (f"ERROR {res['error']}" if res.get("error") else
                                      f"{res.get('windows')} windows ({res.get('passed')} passed), "
                                      f"{res.get('records'):,} records in {res['wall_s']:.1f} s"))
            ok = [x for x in results if not x.get("error")]
            wall = Stats.of(x["wall_s"] for x in ok)
            per_window = Stats.of(x["wall_s"] / max(x.get("windows") or days, 1) for x in ok)
            overhead = Stats.of((x["wall_s"] - x.get("harvest_s", 0)) / max(x.get("windows") or days, 1) for x in ok)
            last_res = ok[-1] if ok else results[-1]
            rows.append([
                label, f"{last_res.get('windows', '-')}", f"{last_res.get('passed', '-')}",
                f"{last_res.get('records', 0):,}" if last_res.get("records") is not None else "-",
                n1(wall.median) if wall else "ERROR", n1(wall.min) if wall else "", n1(wall.max) if wall else "",
                n2(per_window.median) if per_window else "-", n2(overhead.median) if overhead else "-",
                (f"{last_res.get('materialized', '?')} mat., {last_res.get('checked', '?')} checked, "
                 f"{last_res.get('runs', '?')} runs") if mode == "cli" else "ledger only",
            ])
            out["modes"][label] = {"results": results, "wall": wall.as_dict() if wall else None,
                                   "per_window": per_window.as_dict() if per_window else None,
                                   "overhead_per_window": overhead.as_dict() if overhead else None}
    print()
    print(f"== Backfill of {days} daily windows ({rpd} records/day, {out['expected_records'] or '?'} records in "
          f"all; {runs} run(s) per mode) ==")
    print(table(["mode", "windows", "passed", "records", "wall s median", "min", "max", "s/window",
                 "overhead s/window", "per-window checks in Dagster"], rows, right={1, 2, 3, 4, 5, 6, 7, 8}))
    print("overhead = (wall - harvest_window's own seconds from the ledger) / windows. cli = "
          "`harvest-pipeline harvest` (ranged runs of windows_per_run windows, process start included).")
    cli = out["modes"].get("cli")
    if cli:
        steady = Stats.of(x["steady_s_per_window"] for x in cli["results"] if x.get("steady_s_per_window"))
        first = Stats.of(x["first_window_s"] for x in cli["results"] if x.get("first_window_s"))
        if first:
            # Window lines come per run (all of a run's windows at its end), so this is the first run.
            print(f"cli: first run's windows printed {first.median:.1f} s after the command started (imports, "
                  f"definitions, instance, one run)" + (f"; {steady.median:.2f} s per window after that" if steady else ""))
    if cli and cli["wall"]:
        secs = cli["wall"]["median"]
        scale = 365 / days
        numbers = f"{days} windows via the CLI in {secs:.0f} s"
        estimate = secs
        if days != 365:
            estimate = secs * scale  # proportional: start-up is counted 365/days times (an overestimate)
            numbers += f" (~{estimate:.0f} s for 365 by extrapolation)"
        verdict = "PASS" if estimate < TARGET_SECONDS else "MISS"
        best = min(((lab, m["wall"]["median"]) for lab, m in out["modes"].items() if m["wall"] and lab != "cli"),
                   key=lambda x: x[1], default=None)
        if best:
            numbers += f"; best other: {best[0]} {best[1]:.0f} s" + (f" (~{best[1] * scale:.0f} s for 365)" if days != 365 else "")
        out["target"] = {"name": "365-window backfill < 5 min", "verdict": verdict, "numbers": numbers}
        direct = out["modes"].get("direct")
        if direct and direct["wall"]:
            ratio = secs / direct["wall"]["median"]
            out["targets"] = [{"name": "CLI backfill <= 1.2x the direct harvest_window loop",
                               "verdict": "PASS" if ratio <= 1.2 else "MISS",
                               "numbers": f"{secs:.1f} s vs {direct['wall']['median']:.1f} s = {ratio:.2f}x "
                                          f"({days} windows)"}]
            print(f"cli / direct = {ratio:.2f}x (target <= 1.2x)")
    return out

