"""`harvest-pipeline harvest SOURCE`: materialize a source's windows through Dagster."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone

from harvest_pipeline.cli.common import parse_day
from harvest_pipeline.home import ensure_dagster_home


def register(sub) -> None:
    h = sub.add_parser("harvest", help="materialize a source's windows through Dagster")
    h.add_argument("source")
    h.add_argument("--from", dest="from_", type=parse_day, help="first window start (default: the watermark)")
    h.add_argument("--until", type=parse_day, help="last window start, inclusive (default: the last closed window)")
    h.set_defaults(func=cmd_harvest)


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


