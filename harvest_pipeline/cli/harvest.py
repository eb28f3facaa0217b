"""`harvest-pipeline harvest SOURCE`: materialize windows, re-harvest selected records (--identifier) or all (--full)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone

from harvest_pipeline.cli.common import cli_instance, failure_cause, parse_day, progress_line
from harvest_pipeline.home import ensure_dagster_home


def register(sub) -> None:
    h = sub.add_parser("harvest", help="materialize a source's windows through Dagster")
    h.add_argument("source")
    h.add_argument("--from", dest="from_", type=parse_day, help="first window start (default: the watermark)")
    h.add_argument("--until", type=parse_day, help="last window start, inclusive (default: the last closed window)")
    h.add_argument(
        "--identifier", dest="identifiers", action="append", metavar="ID",
        help="re-harvest this record with GetRecord (GetRecordById for a CSW source; repeat for more); runs the job harvest_records",
    )
    h.add_argument(
        "--full", action="store_true",
        help="harvest the whole source in one listing without from/until; runs the job harvest_full",
    )
    h.set_defaults(func=cmd_harvest)


def cmd_harvest(args: argparse.Namespace) -> int:
    ensure_dagster_home()
    from harvest_pipeline.defs.assets import asset_key_for
    from harvest_pipeline.defs.factory import build_definitions, window_job
    from harvest_pipeline.defs.partitions import closed_windows
    from harvest_pipeline.harvest import stop
    from harvest_pipeline.harvest.watermark import launch_ranges
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
    source = sources[args.source]
    if not args.full and not args.identifiers and not _facts_ready(source):
        return 1
    defs = build_definitions([source])
    # SIGTERM/SIGINT: finish the current page (or record), commit it, start nothing further, exit 128+N.
    stop.install()
    if args.full:
        return _run_full(defs, args.source)
    if args.identifiers:
        return _run_selected(defs, args.source, args.identifiers)
    job = window_job(defs, args.source)
    partitions_def = defs.resolve_assets_def(asset_key_for(args.source)).partitions_def
    now = datetime.now(timezone.utc)
    windows = closed_windows(partitions_def, now)
    start_from = args.from_
    if start_from is None:
        with connect(read_only=False) as con:
            start_from = ledger.get_watermark(con, args.source)
        start_from = start_from.replace(tzinfo=timezone.utc) if start_from else None
    selected = []
    for key, start, _end in windows:
        start = start.replace(tzinfo=timezone.utc)
        if start_from is not None and start < start_from:
            continue
        if args.until is not None and start > args.until:
            continue
        selected.append(key)
    if not selected:
        first_last = f"{windows[0][0]}..{windows[-1][0]}" if windows else "none yet"
        print(f"{args.source}: no closed window in that range (windows so far: {first_last})")
        return 0

    ranges = launch_ranges(windows, selected, source.windows_per_run)
    instance = cli_instance()
    failures = 0
    done = 0
    totals = {"records": 0, "upserts": 0, "deletions": 0}
    print(
        f"{args.source}: harvesting {len(selected)} window(s) {selected[0]} .. {selected[-1]} in {len(ranges)} run(s) "
        f"of up to {source.windows_per_run} (runs recorded in {os.environ['DAGSTER_HOME']})"
    )
    stopped = 0
    with progress_line(_page_progress) as clear_progress:
        for first, last in ranges:
            if stop.requested() is not None:
                break
            keys = selected[selected.index(first): selected.index(last) + 1]
            result = job.execute_in_process(
                instance=instance,
                raise_on_error=False,
                **_run_target(args.source, first, last),
                # Our own progress lines replace Dagster's per-event console log; the events
                # still go to the instance, so the UI shows every run in full.
                run_config=QUIET,
            )
            clear_progress()
            _note_dagster_interrupt(result)
            outcomes = window_outcomes(result, keys)
            for key, outcome in outcomes.items():
                done += 1
                if stop.requested() is not None and not outcome.ok and not outcome.metadata:
                    stopped += 1  # the stopped window, and the ones after it that never started
                    print(f"[{done}/{len(selected)}] {key}: STOPPED: {window_failure_message(result, key)}", flush=True)
                    continue
                failures += 0 if outcome.ok else 1
                for k in totals:
                    totals[k] += int(outcome.metadata.get(k, 0) or 0)
                print(f"[{done}/{len(selected)}] {key}: {outcome.line}", flush=True)
            if not all(o.ok for o in outcomes.values()):
                print(f"  (run {result.run_id})")
    watermark = _advance_watermark(args.source, partitions_def)
    ok = len(selected) - failures - stopped - (len(selected) - done)
    print(
        f"{args.source}: {ok}/{len(selected)} windows ok; {totals['records']} records, "
        f"{totals['upserts']} upserts, {totals['deletions']} deletions; watermark {watermark or '(none)'}"
    )
    signum = stop.requested()
    if signum is not None:
        print(f"{args.source}: stopped by {stop.signal_name(signum)} after {ok} of {len(selected)} window(s); {RESUMES}")
        return stop.exit_code(signum)
    return 1 if failures else 0


def _note_dagster_interrupt(result) -> None:
    """A signal that reached Dagster's own handler (between steps) fails the run with
    DagsterExecutionInterruptedError: count it as the stop request it was (which one, Dagster does
    not keep)."""
    from harvest_pipeline.harvest import stop

    if any(
        e.is_step_failure and e.step_failure_data.error is not None
        and e.step_failure_data.error.cls_name == "DagsterExecutionInterruptedError"
        for e in result.all_events
    ):
        stop.request(stop.UNKNOWN_SIGNAL)


def _stopped_run(result, what: str, advice: str) -> int | None:
    """A one-run command (`--full`, `--identifier`) whose run failed because a stop was requested:
    say so and return its exit code; None for any other outcome."""
    from harvest_pipeline.harvest import stop

    _note_dagster_interrupt(result)
    signum = stop.requested()
    if signum is None or result.success:
        return None
    print(f"{what} stopped by {stop.signal_name(signum)}; {advice}  (run {result.run_id})")
    return stop.exit_code(signum)


# What a stopped harvest leaves: said by every way the CLI harvests pages.
RESUMES = "the pages received are committed: run the same command again, it resumes from the last committed page"


def _facts_ready(source) -> bool:
    """A source's first harvest learns its server facts before its partitions are built."""
    from harvest_pipeline.harvest.server_facts import read_facts, refresh_facts
    from harvest_pipeline.store import default_db_path

    if source.start is not None or read_facts(source, default_db_path()) is not None:
        return True
    try:
        facts, _ = refresh_facts(source, default_db_path(), learned_by="harvest-pipeline harvest (first harvest)")
    except Exception as exc:  # noqa: BLE001 - the server's own error says what is wrong
        print(f"{source.id}: cannot ask the server where its records begin: {exc}", file=sys.stderr)
        return False
    if not facts.partitions_start:
        print(f"{source.id}: the server does not say when its records begin; set `start:` for it in the sources file",
              file=sys.stderr)
        return False
    print(f"{source.id}: server facts learned (earliest {facts.earliest_datestamp}, granularity {facts.granularity})")
    return True


def _run_target(source_id: str, first: str, last: str) -> dict:
    """execute_in_process arguments for one window, or a ranged run of first..last."""
    from harvest_pipeline.defs.sensors import SOURCE_TAG, range_tags

    if first == last:
        return {"partition_key": first, "tags": {SOURCE_TAG: source_id}}
    return {"tags": {SOURCE_TAG: source_id, **range_tags(first, last)}}


class WindowOutcome:
    def __init__(self, ok: bool, line: str, metadata: dict):
        self.ok, self.line, self.metadata = ok, line, metadata


def window_outcomes(result, keys: list[str]) -> dict[str, WindowOutcome]:
    """Each window's result line from a run: its materialization and its checks, or why it failed."""
    import dagster as dg

    single = len(keys) == 1
    meta_by_key: dict[str, dict] = {}
    for event in result.get_asset_materialization_events():
        mat = event.materialization
        meta_by_key[mat.partition or keys[0]] = {k: v.value for k, v in mat.metadata.items()}
    checks_by_key: dict[str, list] = {}
    for c in result.get_asset_check_evaluations():
        if c.partition is None and not single:
            continue  # the run's summary of the range; each window has its own
        checks_by_key.setdefault(c.partition or keys[0], []).append(c)
    out = {}
    for key in keys:
        meta = meta_by_key.get(key)
        if meta is None:
            out[key] = WindowOutcome(False, f"FAILED: {window_failure_message(result, key)}", {})
            continue
        checks = checks_by_key.get(key, [])
        bad = [c.check_name for c in checks if not c.passed and c.severity == dg.AssetCheckSeverity.ERROR]
        warn = [c.check_name for c in checks if not c.passed and c.severity == dg.AssetCheckSeverity.WARN]
        verdict = "FAILED CHECKS " + ",".join(bad) if bad else ("UNPROVEN " + ",".join(warn) if warn else "verified")
        size = meta.get("completeListSize")
        of_size = f"of completeListSize {size}" if size is not None else "(server gave no completeListSize)"
        line = (
            f"{meta.get('records', 0)} records {of_size}, {meta.get('upserts', 0)} upserts, "
            f"{meta.get('deletions', 0)} deletions, {meta.get('pages', 0)} pages: {verdict}"
        )
        out[key] = WindowOutcome(not bad, line, meta)
    return out


def window_failure_message(result, key: str) -> str:
    """Why one window of a run failed (the ranged run's Failure names each failed window)."""
    for event in result.all_events:
        if not event.is_step_failure:
            continue
        data = event.step_failure_data
        failed = (data.user_failure_data.metadata.get("failed_windows") if data.user_failure_data else None)
        if failed is not None and key in failed.value:
            return failed.value[key]
    return failure_cause(result)


def _advance_watermark(source_id: str, partitions_def):
    """Apply the watermark rule now (the runs did too), so `status` reflects what this command verified."""
    from harvest_pipeline.defs.partitions import closed_windows
    from harvest_pipeline.harvest.watermark import advance_stored
    from harvest_pipeline.store import connect, transaction

    with connect() as con, transaction(con):
        return advance_stored(con, source_id, closed_windows(partitions_def, datetime.now(timezone.utc)))


# Our own lines replace Dagster's console log, failures included (each prints its cause and the
# run to open in the UI, where Dagster keeps the whole event log and stack traces).
QUIET = {"loggers": {"console": {"config": {"log_level": "CRITICAL"}}}}


def _page_progress(event: dict) -> str:
    """A window's progress line: its page and records of completeListSize so far."""
    total = event.get("complete_list_size")
    return f"  {event.get('window')}: page {event.get('pages')}, {event.get('received')} of {total if total is not None else '?'} records"


def _run_full(defs, source_id: str) -> int:
    """Run `harvest_full` for the source and print its verdict (exit 1 when it failed or a check failed)."""
    from harvest_pipeline.defs.jobs import FULL_JOB, FULL_OP, full_run_config
    from harvest_pipeline.defs.sensors import SOURCE_TAG

    print(f"{source_id}: full harvest, one listing without from/until (run recorded in {os.environ['DAGSTER_HOME']})")
    with progress_line(_page_progress):
        result = defs.resolve_job_def(FULL_JOB).execute_in_process(
            instance=cli_instance(), raise_on_error=False, tags={SOURCE_TAG: source_id},
            run_config={**full_run_config(source_id), **QUIET},
        )
    stopped = _stopped_run(result, f"{source_id}: full harvest", RESUMES)
    if stopped is not None:
        return stopped
    if not result.success:
        print(f"{source_id}: full harvest FAILED: {failure_cause(result)}  (run {result.run_id})")
        return 1
    out = result.output_for_node(FULL_OP)
    size = out.get("completeListSize")
    of_size = f"of completeListSize {size}" if size is not None else "(server gave no completeListSize)"
    verdict = "verified" if all(out["checks"].values()) else "UNPROVEN complete"
    print(
        f"{source_id}: {out['window']}: {out['records']} records {of_size}, {out['upserts']} upserts, "
        f"{out['deletions']} deletions, {out['unchanged']} unchanged, {out['pages']} pages: {verdict}  (run {result.run_id})"
    )
    return 0


def _run_selected(defs, source_id: str, identifiers: list[str]) -> int:
    """Run `harvest_records` for the source; print each identifier's outcome (exit 1 if one is unknown upstream)."""
    from harvest_pipeline.defs.jobs import RECORDS_JOB, RECORDS_OP, records_run_config
    from harvest_pipeline.defs.sensors import SOURCE_TAG
    from harvest_pipeline.harvest import stop

    result = defs.resolve_job_def(RECORDS_JOB).execute_in_process(
        instance=cli_instance(), raise_on_error=False, tags={SOURCE_TAG: source_id},
        run_config={**records_run_config(source_id, identifiers), **QUIET},
    )
    stopped = _stopped_run(result, f"{source_id}: re-harvest",
                           "run the same command again (merging a record's same version again changes nothing)")
    if stopped is not None:
        return stopped
    if not result.success:
        print(f"{source_id}: re-harvest FAILED: {failure_cause(result)}  (run {result.run_id})")
        return 1
    out = result.output_for_node(RECORDS_OP)
    print(
        f"{source_id}: re-harvested {out['fetched']} of {out['requested']} record(s) with {out['verb']} "
        f"as {out['window']}  (run {result.run_id})"
    )
    width = max(len(i) for i in identifiers)
    for identifier in dict.fromkeys(i.strip() for i in identifiers if i.strip()):
        if identifier in out["not_found"]:
            why = "idDoesNotExist" if out["verb"] == "GetRecord" else f"not in the {out['verb']} answer"
            print(f"  {identifier.ljust(width)}  NOT FOUND upstream ({why}): the local record is left untouched")
        elif identifier in out["not_fetched"]:
            print(f"  {identifier.ljust(width)}  NOT FETCHED (stopped before its {out['verb']})")
        else:
            print(f"  {identifier.ljust(width)}  {out['actions'].get(identifier, '?')}")
    for warning in out["warnings"]:
        print(f"  warning: {warning}")
    if out["stopped_by"]:
        print(f"{source_id}: stopped by {stop.signal_name(out['stopped_by'])}; the records fetched are merged: run the "
              f"command again with the {len(out['not_fetched'])} identifier(s) NOT FETCHED")
        return stop.exit_code(out["stopped_by"])
    return 1 if out["not_found"] else 0

