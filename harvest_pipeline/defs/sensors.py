"""The watermark sensor `harvest_watermarks`: every source's closed windows, launched as batch runs.

One sensor for all sources (one tick costs one read of run storage and one read-only open of the
catalogue, whatever the number of sources). Each tick, per source:

1. the windows in flight: runs queued or running of the batch job `harvest_windows` (their run
   config lists the windows per source) and UI or CLI launches of the source's asset;
2. the ledger rows from the watermark on, through a read-only open of the catalogue that gives up
   after LEDGER_WAIT_SECONDS when a writer holds DuckDB's lock (the next tick reads it); the
   sensor writes nothing to the catalogue;
3. the watermark (harvest/watermark.py) and the windows at or after it that are not verified
   and not in flight, failed ones retried with exponential backoff, cut into chunks of
   `windows_per_run`. A source has at most CHUNKS_IN_FLIGHT chunks in flight: the second one's
   run starts its process while the first harvests, then waits for the source's lock, so a long
   catch-up runs without a gap between chunks.

The chunks of up to `HARVEST_SOURCES_PER_RUN` sources go into one run of `harvest_windows`
(defs/batch.py), which harvests its sources side by side in one process.

Sources whose server facts are not known (no `start`, never refreshed) get one
`server_facts_refresh` run requested for all of them, at most every FACTS_RETRY_SECONDS.
"""

from __future__ import annotations

import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from harvest_pipeline.defs.batch import BATCH_JOB, batch_run_config, batch_tags, batch_windows
from harvest_pipeline.defs.partitions import closed_windows
from harvest_pipeline.errors import HarvestError, StoreLockedError
from harvest_pipeline.harvest.server_facts import read_facts
from harvest_pipeline.harvest.watermark import plan_tick
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect, ledger

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
SENSOR_NAME = "harvest_watermarks"
SOURCE_TAG = "harvest/source"
# Dagster's run tags of a ranged run (read by RunRequest.partition_key_range); public strings.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"
# How long a read of the catalogue may wait for a writer before the tick gives up.
LEDGER_WAIT_SECONDS = 2.0
FACTS_RETRY_SECONDS = 600
CHUNKS_IN_FLIGHT = 2
DEFAULT_SOURCES_PER_RUN = 100
TICK_SECONDS = 30


def sources_per_run() -> int:
    """How many sources one batch run harvests at once (HARVEST_SOURCES_PER_RUN, default 100)."""
    try:
        return max(1, int(os.environ.get("HARVEST_SOURCES_PER_RUN") or DEFAULT_SOURCES_PER_RUN))
    except ValueError:
        return DEFAULT_SOURCES_PER_RUN


def range_tags(first: str, last: str) -> dict[str, str]:
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}


def run_partition_keys(run, partitions_def: dg.PartitionsDefinition) -> list[str]:
    """The windows a run of the asset covers: its partition, or every key of its range."""
    key = run.tags.get(PARTITION_TAG)
    if key:
        return [key]
    first, last = run.tags.get(RANGE_START_TAG), run.tags.get(RANGE_END_TAG)
    if first and last:
        try:
            return list(partitions_def.get_partition_keys_in_range(dg.PartitionKeyRange(first, last)))
        except Exception:  # noqa: BLE001 - a range of an older partitions definition
            return [first, last]
    return []


def in_flight_chunks(instance: dg.DagsterInstance, partitions_by_source: dict) -> dict[str, list[set[str]]]:
    """Per source, the window sets of its runs queued or running (batch runs and asset launches)."""
    by_key = {dg.AssetKey(["harvest", sid]): sid for sid in partitions_by_source}
    chunks: dict[str, list[set[str]]] = {}
    for run in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT)):
        if run.job_name == BATCH_JOB:
            for sid, keys in batch_windows(run.run_config).items():
                chunks.setdefault(sid, []).append(set(keys))
            continue
        for key in run.asset_selection or ():
            sid = by_key.get(key)
            if sid is not None:
                chunks.setdefault(sid, []).append(set(run_partition_keys(run, partitions_by_source[sid])))
    return chunks


def read_ledgers(db_path: Path, source_ids: list[str]) -> dict[str, tuple[datetime | None, dict]]:
    """Per source (watermark, ledger rows from it on); empty before the first harvest. Raises StoreLockedError."""
    if not db_path.exists():
        return {}
    with connect(db_path, read_only=True, wait_seconds=LEDGER_WAIT_SECONDS) as con:
        # Two statements for every source (a tick of 100 sources asked 200 before).
        watermarks = ledger.get_watermarks(con, list(source_ids))
        rows = ledger.list_windows_since(con, watermarks)
    return {sid: (watermarks[sid], {r.window_start: r for r in rows[sid]}) for sid in source_ids}


def plan_runs(due: dict[str, list[list[str]]], per_run: int) -> list[dict[str, list[str]]]:
    """Batch runs from each source's due chunks: first chunks first, at most `per_run` sources a run."""
    runs: list[dict[str, list[str]]] = []
    depth = max((len(c) for c in due.values()), default=0)
    for level in range(depth):
        sources = [sid for sid in due if len(due[sid]) > level]
        for i in range(0, len(sources), per_run):
            runs.append({sid: due[sid][level] for sid in sources[i:i + per_run]})
    return runs


def build_watermark_sensor(
    sources: list[SourceConfig],
    partitions_by_source: dict,
    batch_job: dg.JobDefinition,
    facts_job: dg.JobDefinition,
    *,
    db_path: Path,
    unknown_start: set[str],
) -> dg.SensorDefinition:
    known = [s for s in sources if s.id not in unknown_start]

    @dg.sensor(
        name=SENSOR_NAME,
        jobs=[batch_job, facts_job],
        minimum_interval_seconds=TICK_SECONDS,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            "Keeps every source in sync: requests each source's closed windows since its watermark as runs "
            f"of {BATCH_JOB} (up to `windows_per_run` windows of up to HARVEST_SOURCES_PER_RUN sources per run); "
            "the runs advance each watermark over verified windows. Requests server_facts_refresh for sources "
            "whose server facts are unknown."
        ),
    )
    def harvest_watermarks(context: dg.SensorEvaluationContext):
        now = datetime.now(timezone.utc)
        state = _cursor(context.cursor)
        requests, notes = [], []
        facts_request = _facts_request(sources, unknown_start, facts_job, db_path, state, notes)
        if facts_request is not None:
            requests.append(facts_request)
        in_flight = in_flight_chunks(context.instance, partitions_by_source)
        try:
            ledgers = read_ledgers(db_path, [s.id for s in known])
        except StoreLockedError:
            return _result(requests, state, "a merge holds the catalogue right now; the next tick reads the ledger")
        except HarvestError as exc:
            return _result(requests, state, f"cannot read the ledger: {exc}")
        due: dict[str, list[list[str]]] = {}
        for source in known:
            watermark, rows = ledgers.get(source.id, (None, {}))
            flying = in_flight.get(source.id, [])
            flying_keys = set().union(*flying) if flying else set()
            windows = closed_windows(partitions_by_source[source.id], now, since=watermark)
            new_watermark, launch = plan_tick(
                windows=windows, ledger_rows=rows, watermark=watermark, in_flight=flying_keys,
                now=now.replace(tzinfo=None), limit=max(source.max_windows_per_tick - len(flying_keys), 0),
            )
            state["watermarks"][source.id] = new_watermark.isoformat() if new_watermark else None
            room = max(CHUNKS_IN_FLIGHT - len(flying), 0)
            size = source.windows_per_run
            chunks = [launch[i:i + size] for i in range(0, len(launch), size)][:room]
            if chunks:
                due[source.id] = chunks
        runs = plan_runs(due, sources_per_run())
        for windows in runs:
            requests.append(dg.RunRequest(job_name=batch_job.name, run_config=batch_run_config(windows),
                                          tags=batch_tags(windows)))
        state["launched"] = {sid: f"{c[0][0]}...{c[-1][-1]}" for sid, c in list(due.items())[:20]}
        state["in_flight_sources"] = len(in_flight)
        if not runs:
            notes.append(f"nothing to launch ({len(in_flight)} source(s) with windows in flight)")
        return _result(requests, state, "; ".join(notes) if not requests else None)

    return harvest_watermarks


def _cursor(text: str | None) -> dict:
    try:
        state = json.loads(text) if text else {}
    except ValueError:
        state = {}
    if not isinstance(state, dict):
        state = {}
    state.setdefault("watermarks", {})
    return state


def _result(requests: list, state: dict, skip: str | None):
    cursor = json.dumps(state, sort_keys=True)
    if not requests:
        return dg.SensorResult(skip_reason=skip or "nothing to launch", cursor=cursor)
    return dg.SensorResult(run_requests=requests, cursor=cursor)


def _facts_request(sources, unknown_start: set[str], facts_job, db_path: Path, state: dict, notes: list):
    """One server_facts_refresh run for the sources whose facts are unknown, at most every 10 minutes."""
    from harvest_pipeline.defs.facts import facts_run_config

    ask = []
    for source in sources:
        if source.id not in unknown_start:
            continue
        facts = read_facts(source, db_path)
        if facts is not None and facts.partitions_start:
            notes.append(f"{source.id}: server facts learned {facts.learned_at}; reload the code location "
                         "(Deployment > Reload) to see its partitions")
        elif facts is not None:
            notes.append(f"{source.id}: the server does not say when its records begin: set `start:` in the sources file")
        else:
            ask.append(source.id)
    if not ask or time.time() - float(state.get("facts_requested_at") or 0) < FACTS_RETRY_SECONDS:
        if ask:
            notes.append(f"server facts unknown for {', '.join(ask[:10])}; a refresh was requested recently")
        return None
    state["facts_requested_at"] = time.time()
    return dg.RunRequest(job_name=facts_job.name, run_config=facts_run_config(ask),
                         tags={SOURCE_TAG: ask[0]} if len(ask) == 1 else {})
