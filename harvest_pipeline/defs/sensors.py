"""The watermark sensor per source: request closed windows as ranged runs of the source's job.

Each tick reads little and never waits: the source's in-flight runs from Dagster's run storage
(two queries filtered by job name), and the ledger rows from the watermark on, through a
read-only open of the catalogue that gives up at once when a merge holds the lock (the next tick
reads it). From those it computes the watermark (the rule of harvest/watermark.py) and requests
the windows at or after it that are not verified and not in flight, retrying failed ones with
exponential backoff, as runs of up to `windows_per_run` consecutive windows on the job
`harvest_<id>`. The runs store the watermark when their windows are done; the sensor writes
nothing to the catalogue. Runs of one source are serialized by its pool.

A source whose server facts are not known (no `start`, never refreshed) gets the job
`server_facts_refresh` requested instead, at most every FACTS_RETRY_SECONDS.
"""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone
from pathlib import Path

import dagster as dg

from harvest_pipeline.defs.partitions import closed_windows
from harvest_pipeline.errors import HarvestError, StoreLockedError
from harvest_pipeline.harvest.server_facts import read_facts
from harvest_pipeline.harvest.watermark import launch_ranges, plan_tick
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect, ledger

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
SOURCE_TAG = "harvest/source"
# Dagster's run tags of a ranged run (read by RunRequest.partition_key_range); public strings.
RANGE_START_TAG = "dagster/asset_partition_range_start"
RANGE_END_TAG = "dagster/asset_partition_range_end"
PARTITION_TAG = "dagster/partition"
# UI backfills and asset-page launches run the implicit asset job, not `harvest_<id>`.
IMPLICIT_ASSET_JOB = "__ASSET_JOB"
# How long a read of the catalogue may wait for a writer before the tick gives up.
LEDGER_WAIT_SECONDS = 0.5
FACTS_RETRY_SECONDS = 600


def range_tags(first: str, last: str) -> dict[str, str]:
    return {RANGE_START_TAG: first, RANGE_END_TAG: last}


def run_partition_keys(run, partitions_def: dg.PartitionsDefinition) -> list[str]:
    """The windows a run covers: its partition, or every key of its range."""
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


def in_flight_windows(instance: dg.DagsterInstance, job_name: str, asset_key: dg.AssetKey,
                      partitions_def: dg.PartitionsDefinition) -> set[str]:
    """Windows of runs queued or running: the source's job, and UI launches of its asset."""
    runs = list(instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT, job_name=job_name)))
    runs += [
        r for r in instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT, job_name=IMPLICIT_ASSET_JOB))
        if asset_key in (r.asset_selection or ())
    ]
    return {k for r in runs for k in run_partition_keys(r, partitions_def)}


def read_ledger(db_path: Path, source_id: str) -> tuple[datetime | None, dict]:
    """(watermark, ledger rows from it on); empty before the first harvest. Raises StoreLockedError."""
    if not db_path.exists():
        return None, {}
    with connect(db_path, read_only=True, wait_seconds=LEDGER_WAIT_SECONDS) as con:
        watermark = ledger.get_watermark(con, source_id)
        rows = {r.window_start: r for r in ledger.list_windows(con, source_id, since=watermark)}
    return watermark, rows


def build_watermark_sensor(
    source: SourceConfig,
    partitions_def: dg.TimeWindowPartitionsDefinition,
    job: dg.JobDefinition,
    facts_job: dg.JobDefinition,
    *,
    db_path: Path,
    start_known: bool,
) -> dg.SensorDefinition:
    asset_key = dg.AssetKey(["harvest", source.id])

    @dg.sensor(
        name=f"harvest_{source.id}_watermark",
        jobs=[job, facts_job],
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Keeps {source.id} in sync: requests the closed windows since the watermark as runs of "
            f"up to {source.windows_per_run} windows on {job.name}; runs advance the watermark over "
            "verified windows. Requests server_facts_refresh while the server's facts are unknown."
        ),
    )
    def watermark_sensor(context: dg.SensorEvaluationContext):
        if not start_known:
            return _request_facts(context, source, facts_job, db_path)
        now = datetime.now(timezone.utc)
        in_flight = in_flight_windows(context.instance, job.name, asset_key, partitions_def)
        try:
            watermark, rows = read_ledger(db_path, source.id)
        except StoreLockedError:
            return dg.SkipReason("a merge holds the catalogue right now; the next tick reads the ledger")
        except HarvestError as exc:
            return dg.SkipReason(f"cannot read the ledger: {exc}")
        windows = closed_windows(partitions_def, now, since=watermark)
        new_watermark, launch = plan_tick(
            windows=windows, ledger_rows=rows, watermark=watermark, in_flight=in_flight,
            now=now.replace(tzinfo=None), limit=max(source.max_windows_per_tick - len(in_flight), 0),
        )
        ranges = launch_ranges(windows, launch, source.windows_per_run)
        cursor = json.dumps({
            "watermark": new_watermark.isoformat() if new_watermark else None,
            "in_flight": len(in_flight),
            "launched": [f"{a}...{b}" if a != b else a for a, b in ranges[:5]],
        })
        if not ranges:
            return dg.SensorResult(
                skip_reason=f"watermark {new_watermark}: nothing to launch ({len(in_flight)} window(s) in flight)",
                cursor=cursor,
            )
        return dg.SensorResult(run_requests=[_run_request(job, source, a, b) for a, b in ranges], cursor=cursor)

    return watermark_sensor


def _run_request(job: dg.JobDefinition, source: SourceConfig, first: str, last: str) -> dg.RunRequest:
    tags = {SOURCE_TAG: source.id}
    if first == last:
        return dg.RunRequest(job_name=job.name, partition_key=first, tags=tags)
    return dg.RunRequest(job_name=job.name, tags={**tags, **range_tags(first, last)})


def _request_facts(context: dg.SensorEvaluationContext, source: SourceConfig, facts_job: dg.JobDefinition,
                   db_path: Path):
    from harvest_pipeline.defs.facts import facts_run_config

    facts = read_facts(source, db_path)
    if facts is not None and facts.partitions_start:
        return dg.SkipReason(
            f"server facts learned {facts.learned_at}: reload the code location (Deployment > Reload) "
            "to see the source's partitions"
        )
    if facts is not None:
        return dg.SkipReason(
            f"the server does not say when its records begin (facts learned {facts.learned_at}): "
            "set `start:` for this source in the sources file"
        )
    try:
        last = float(context.cursor or 0)
    except ValueError:  # a cursor of the watermark kind, from before the facts were lost
        last = 0.0
    if time.time() - last < FACTS_RETRY_SECONDS:
        return dg.SkipReason("server facts unknown; a refresh was requested recently")
    return dg.SensorResult(
        run_requests=[dg.RunRequest(
            job_name=facts_job.name, run_config=facts_run_config([source.id]), tags={SOURCE_TAG: source.id},
        )],
        cursor=str(time.time()),
    )
