"""`harvest-pipeline`: harvest, status, probe, and the local demo (`dev`, `demo-server`)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
from datetime import date, datetime, timezone
from pathlib import Path

from harvest_pipeline.errors import ConfigError, HarvestError
from harvest_pipeline.home import ensure_dagster_home


def _parse_day(text: str) -> datetime:
    try:
        d = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (use YYYY-MM-DD or an ISO timestamp)") from None
    return d.replace(tzinfo=timezone.utc) if d.tzinfo is None else d.astimezone(timezone.utc)


def _json_default(value):
    if isinstance(value, (datetime, date)):
        return value.isoformat()
    return str(value)


# --- harvest -------------------------------------------------------------------------------
def cmd_harvest(args: argparse.Namespace) -> int:
    ensure_dagster_home()
    import dagster as dg

    from harvest_pipeline.defs.factory import build_definitions, job_name
    from harvest_pipeline.defs.sensors import SOURCE_TAG
    from harvest_pipeline.harvest.progress import subscribe
    from harvest_pipeline.sources import load_sources
    from harvest_pipeline.store import connect, ledger

    sources = {s.id: s for s in load_sources()}
    if args.source not in sources:
        print(f"unknown source {args.source!r}; known: {', '.join(sorted(sources)) or '(none)'}", file=sys.stderr)
        return 2
    defs = build_definitions([sources[args.source]])
    job = defs.resolve_job_def(job_name(args.source))
    partitions_def = job.partitions_def
    keys = partitions_def.get_partition_keys(current_time=datetime.now(timezone.utc))
    start_from = args.from_
    if start_from is None:
        with connect(read_only=False) as con:
            start_from = ledger.get_watermark(con, args.source)
        start_from = start_from.replace(tzinfo=timezone.utc) if start_from else None
    selected = []
    for key in keys:
        tw = partitions_def.time_window_for_partition_key(key)
        if start_from is not None and tw.start < start_from:
            continue
        if args.until is not None and tw.start > args.until:
            continue
        selected.append(key)
    if not selected:
        print(f"{args.source}: no closed window in that range (windows so far: {keys[:1]}..{keys[-1:]})")
        return 0

    interactive = sys.stdout.isatty()

    def show(event: dict) -> None:
        total = event["complete_list_size"]
        line = f"  {event['window']}: page {event['pages']}, {event['received']} of {total if total is not None else '?'} records"
        if interactive:
            print("\r" + line.ljust(78), end="", flush=True)

    unsubscribe = subscribe(show)
    instance = dg.DagsterInstance.get()
    failures = 0
    totals = {"records": 0, "upserts": 0, "deletions": 0}
    print(f"{args.source}: harvesting {len(selected)} window(s) {selected[0]} .. {selected[-1]} (runs recorded in {os.environ['DAGSTER_HOME']})")
    try:
        for i, key in enumerate(selected, 1):
            result = job.execute_in_process(
                partition_key=key,
                instance=instance,
                raise_on_error=False,
                tags={SOURCE_TAG: args.source},
                # Our own progress lines replace Dagster's per-event console log; the events
                # still go to the instance, so the UI shows every run in full.
                run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
            )
            if interactive:
                print("\r" + " " * 78 + "\r", end="")
            meta = {}
            for event in result.get_asset_materialization_events():
                meta = {k: v.value for k, v in event.materialization.metadata.items()}
            checks = result.get_asset_check_evaluations()
            bad = [c.check_name for c in checks if not c.passed and c.severity == dg.AssetCheckSeverity.ERROR]
            warn = [c.check_name for c in checks if not c.passed and c.severity == dg.AssetCheckSeverity.WARN]
            if not result.success or bad:
                failures += 1
            for k in totals:
                totals[k] += int(meta.get(k, 0) or 0)
            if result.success:
                verdict = "FAILED CHECKS " + ",".join(bad) if bad else ("UNPROVEN " + ",".join(warn) if warn else "verified")
                size = meta.get("completeListSize")
                of_size = f"of completeListSize {size}" if size is not None else "(server gave no completeListSize)"
                print(
                    f"[{i}/{len(selected)}] {key}: {meta.get('records', 0)} records {of_size}, {meta.get('upserts', 0)} upserts, "
                    f"{meta.get('deletions', 0)} deletions, {meta.get('pages', 0)} pages: {verdict}"
                )
            else:
                err = next((e.step_failure_data.error for e in result.all_events if e.is_step_failure), None)
                msg = err.message.strip().splitlines()[-1] if err else "run failed"
                print(f"[{i}/{len(selected)}] {key}: FAILED: {msg}  (run {result.run_id})")
    finally:
        unsubscribe()
    watermark = _advance_watermark(args.source, partitions_def)
    print(
        f"{args.source}: {len(selected) - failures}/{len(selected)} windows ok; {totals['records']} records, "
        f"{totals['upserts']} upserts, {totals['deletions']} deletions; watermark {watermark or '(none)'}"
    )
    return 1 if failures else 0


def _advance_watermark(source_id: str, partitions_def):
    """Apply the sensor's watermark rule now, so `status` reflects what this command verified."""
    from harvest_pipeline.defs.sensors import closed_windows
    from harvest_pipeline.harvest.watermark import advance
    from harvest_pipeline.store import connect, ledger

    with connect() as con:
        rows = {r.window_start: r for r in ledger.list_windows(con, source_id)}
        current = ledger.get_watermark(con, source_id)
        new = advance(closed_windows(partitions_def, datetime.now(timezone.utc)), rows, current)
        if new is not None and new != current:
            ledger.set_watermark(con, source_id, new)
    return new


# --- status --------------------------------------------------------------------------------
def cmd_status(args: argparse.Namespace) -> int:
    from harvest_pipeline.sources import load_sources
    from harvest_pipeline.store import connect, default_db_path
    from harvest_pipeline.store.staging import open_staging_files
    from harvest_pipeline.store.status import failing_windows, source_summary

    sources = load_sources()
    db_path = default_db_path()
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    out = []
    if not db_path.exists():
        summaries = [{"source_id": s.id, "watermark": None, "live": 0, "deleted": 0, "windows": {}, "last_run": None} for s in sources]
        failing = {s.id: [] for s in sources}
    else:
        with connect(db_path) as con:
            summaries = [source_summary(con, s.id) for s in sources]
            failing = {s.id: failing_windows(con, s.id) for s in sources}
    for s, summary in zip(sources, summaries):
        wm = summary["watermark"]
        summary["lag_seconds"] = (now - wm).total_seconds() if wm else None
        summary["url"] = s.url
        summary["window"] = s.window
        summary["open_cursors"] = [p.stem for p in open_staging_files(db_path, s.id)]
        summary["failing_windows"] = [{"window": w, "status": st, "error": e} for w, st, e in failing[s.id]]
        out.append(summary)
    if args.json:
        print(json.dumps(out, default=_json_default, indent=2))
        return 0
    for s in out:
        wm = s["watermark"].isoformat() + "Z" if s["watermark"] else "(none yet)"
        lag = f"{s['lag_seconds'] / 3600:.1f} h" if s["lag_seconds"] is not None else "-"
        print(f"{s['source_id']}  ({s['url']}, {s['window']} windows)")
        print(f"  watermark   {wm}   lag {lag}")
        print(f"  records     {s['live']} live, {s['deleted']} deleted")
        ws = ", ".join(f"{k} {v}" for k, v in sorted(s["windows"].items())) or "none harvested"
        print(f"  windows     {ws}")
        lr = s["last_run"]
        if lr:
            when = lr["finished_at"] or lr["started_at"]
            print(
                f"  last run    {lr['window']} {lr['status']} at {when:%Y-%m-%d %H:%M:%S}Z "
                f"(run {lr['run_id']}); checks: " + ", ".join(f"{k} {v}" for k, v in lr["checks"].items())
            )
        for w in s["failing_windows"]:
            print(f"  ! {w['window']} {w['status']}: {w['error'][:160]}")
        if s["open_cursors"]:
            print(f"  open cursors (interrupted or running windows): {', '.join(s['open_cursors'])}")
    return 0


# --- probe ---------------------------------------------------------------------------------
def cmd_probe(args: argparse.Namespace) -> int:
    from harvest_pipeline.oai.client import OAIClient

    client = OAIClient(args.url, timeout=args.timeout)
    info = client.identify()
    print("Identify")
    for field in ("repository_name", "base_url", "protocol_version", "earliest_datestamp", "deleted_record", "granularity"):
        print(f"  {field:20} {getattr(info, field)}")
    if info.admin_emails:
        print(f"  {'admin_emails':20} {', '.join(info.admin_emails)}")
    print("ListMetadataFormats")
    for fmt in client.list_metadata_formats():
        print(f"  {fmt.prefix:14} {fmt.namespace}")
    print("ListSets")
    try:
        for n, s in enumerate(client.list_sets()):
            if n >= args.max_sets:
                print(f"  ... (more than {args.max_sets})")
                break
            print(f"  {s.spec:24} {s.name}")
    except HarvestError as exc:
        print(f"  ({exc})")
    return 0


# --- demo ----------------------------------------------------------------------------------
def cmd_demo_server(args: argparse.Namespace) -> int:
    from harvest_pipeline.demo.__main__ import main as demo_main

    return demo_main(args.demo_args) or 0


def cmd_dev(args: argparse.Namespace) -> int:
    """Start the demo provider, then `dagster dev` on this project, and stop both together."""
    home = ensure_dagster_home()
    demo = subprocess.Popen(
        [sys.executable, "-m", "harvest_pipeline.demo", "--port", str(args.demo_port)],
        stdout=subprocess.PIPE, text=True,
    )
    line = demo.stdout.readline().strip()
    if demo.poll() is not None or "listening" not in line:
        print(f"the demo provider did not start (port {args.demo_port} busy?): {line}", file=sys.stderr)
        return 1
    print(line, flush=True)
    env = {**os.environ, "HARVEST_DEMO_URL": f"http://127.0.0.1:{args.demo_port}/oai"}
    print(f"Dagster UI on http://127.0.0.1:{args.ui_port}  (DAGSTER_HOME={home})", flush=True)
    ui = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", args.ui_host, "-p", str(args.ui_port)],
        env=env,
    )
    # SIGTERM (e.g. from a service manager) stops both children as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return ui.wait()
    except KeyboardInterrupt:
        ui.send_signal(signal.SIGINT)
        try:
            return ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ui.kill()
            return 1
    finally:
        demo.terminate()
        demo.wait(timeout=10)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harvest-pipeline", description=__doc__)
    sub = p.add_subparsers(dest="command", required=True)

    h = sub.add_parser("harvest", help="materialize a source's windows through Dagster")
    h.add_argument("source")
    h.add_argument("--from", dest="from_", type=_parse_day, help="first window start (default: the watermark)")
    h.add_argument("--until", type=_parse_day, help="last window start, inclusive (default: the last closed window)")
    h.set_defaults(func=cmd_harvest)

    s = sub.add_parser("status", help="watermark, lag, counts and last run per source")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)

    pr = sub.add_parser("probe", help="what a server says in Identify, ListMetadataFormats and ListSets")
    pr.add_argument("url")
    pr.add_argument("--timeout", type=float, default=30)
    pr.add_argument("--max-sets", type=int, default=50)
    pr.set_defaults(func=cmd_probe)

    d = sub.add_parser("dev", help="start the demo provider and the Dagster UI")
    d.add_argument("--demo-port", type=int, default=8765)
    d.add_argument("--ui-host", default="127.0.0.1")
    d.add_argument("--ui-port", type=int, default=3000)
    d.set_defaults(func=cmd_dev)

    ds = sub.add_parser("demo-server", help="serve the demo OAI-PMH provider (flags: python -m harvest_pipeline.demo --help)")
    ds.add_argument("demo_args", nargs=argparse.REMAINDER)
    ds.set_defaults(func=cmd_demo_server)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except HarvestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
