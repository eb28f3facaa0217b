"""`harvest-pipeline harvest SOURCE`: materialize windows, re-harvest selected records (--identifier) or all (--full)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone

from harvest_pipeline.cli.common import failure_cause, parse_day
from harvest_pipeline.home import ensure_dagster_home


def register(sub) -> None:
    h = sub.add_parser("harvest", help="materialize a source's windows through Dagster")
    h.add_argument("source")
    h.add_argument("--from", dest="from_", type=parse_day, help="first window start (default: the watermark)")
    h.add_argument("--until", type=parse_day, help="last window start, inclusive (default: the last closed window)")
    h.add_argument(
        "--identifier", dest="identifiers", action="append", metavar="ID",
        help="re-harvest this record with GetRecord (repeat for more); runs the job harvest_<source>_records",
    )
    h.add_argument(
        "--full", action="store_true",
        help="harvest the whole source in one listing without from/until; runs the job harvest_<source>_full",
    )
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
    if (args.full or args.identifiers) and (args.from_ or args.until):
        print("--from/--until select windows; they cannot be combined with --full or --identifier", file=sys.stderr)
        return 2
    if args.full and args.identifiers:
        print("--full and --identifier are separate runs; give one of them", file=sys.stderr)
        return 2
    defs = build_definitions([sources[args.source]])
    if args.full:
        return _run_full(defs, args.source)
    if args.identifiers:
        return _run_selected(defs, args.source, args.identifiers)
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
                print(f"[{i}/{len(selected)}] {key}: FAILED: {failure_cause(result)}  (run {result.run_id})")
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


# Our own lines replace Dagster's per-event console log; the events still go to the instance.
QUIET = {"loggers": {"console": {"config": {"log_level": "ERROR"}}}}


def _run_full(defs, source_id: str) -> int:
    """Run `harvest_<source>_full` and print its verdict (exit 1 when it failed or a check failed)."""
    import dagster as dg

    from harvest_pipeline.defs.jobs import full_job_name, full_op_name
    from harvest_pipeline.defs.sensors import SOURCE_TAG
    from harvest_pipeline.harvest.progress import subscribe

    interactive = sys.stdout.isatty()

    def show(event: dict) -> None:
        if interactive:
            total = event.get("complete_list_size")
            line = f"  {event.get('window')}: page {event.get('pages')}, {event.get('received')} of {total if total is not None else '?'} records"
            print("\r" + line.ljust(78), end="", flush=True)

    unsubscribe = subscribe(show)
    print(f"{source_id}: full harvest, one listing without from/until (run recorded in {os.environ['DAGSTER_HOME']})")
    try:
        result = defs.resolve_job_def(full_job_name(source_id)).execute_in_process(
            instance=dg.DagsterInstance.get(), raise_on_error=False, tags={SOURCE_TAG: source_id}, run_config=QUIET,
        )
    finally:
        unsubscribe()
    if interactive:
        print("\r" + " " * 78 + "\r", end="")
    if not result.success:
        print(f"{source_id}: full harvest FAILED: {failure_cause(result)}  (run {result.run_id})")
        return 1
    out = result.output_for_node(full_op_name(source_id))
    size = out.get("completeListSize")
    of_size = f"of completeListSize {size}" if size is not None else "(server gave no completeListSize)"
    verdict = "verified" if all(out["checks"].values()) else "UNPROVEN complete"
    print(
        f"{source_id}: {out['window']}: {out['records']} records {of_size}, {out['upserts']} upserts, "
        f"{out['deletions']} deletions, {out['unchanged']} unchanged, {out['pages']} pages: {verdict}  (run {result.run_id})"
    )
    return 0


def _run_selected(defs, source_id: str, identifiers: list[str]) -> int:
    """Run `harvest_<source>_records`; print each identifier's outcome (exit 1 if one is unknown upstream)."""
    import dagster as dg

    from harvest_pipeline.defs.jobs import (
        records_job_name,
        records_op_name,
        records_run_config,
    )
    from harvest_pipeline.defs.sensors import SOURCE_TAG

    result = defs.resolve_job_def(records_job_name(source_id)).execute_in_process(
        instance=dg.DagsterInstance.get(), raise_on_error=False, tags={SOURCE_TAG: source_id},
        run_config={**records_run_config(source_id, identifiers), **QUIET},
    )
    if not result.success:
        print(f"{source_id}: re-harvest FAILED: {failure_cause(result)}  (run {result.run_id})")
        return 1
    out = result.output_for_node(records_op_name(source_id))
    print(
        f"{source_id}: re-harvested {out['fetched']} of {out['requested']} record(s) with GetRecord "
        f"as {out['window']}  (run {result.run_id})"
    )
    width = max(len(i) for i in identifiers)
    for identifier in dict.fromkeys(i.strip() for i in identifiers if i.strip()):
        if identifier in out["not_found"]:
            print(f"  {identifier.ljust(width)}  NOT FOUND upstream (idDoesNotExist): the local record is left untouched")
        else:
            print(f"  {identifier.ljust(width)}  {out['actions'].get(identifier, '?')}")
    return 1 if out["not_found"] else 0

