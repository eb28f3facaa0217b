"""The watermark sensor per source: launch closed windows, advance over verified ones.

Each tick (1) moves the source's watermark forward over consecutive windows whose checks passed
(ledger status verified/unproven), never past one that failed or is missing, and (2) requests runs
for windows at or after the watermark that are not verified and not already in flight, retrying
failed ones with exponential backoff. Runs of one source are serialized by its pool.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone

import dagster as dg

from harvest_pipeline.defs.assets import asset_key_for
from harvest_pipeline.errors import StoreLockedError
from harvest_pipeline.harvest.watermark import plan_tick
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect, ledger

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]
SOURCE_TAG = "harvest/source"


def closed_windows(partitions_def: dg.TimeWindowPartitionsDefinition, now: datetime) -> list[tuple[str, datetime, datetime]]:
    """(key, start, end) of every closed window, naive UTC, in time order."""
    out = []
    for key in partitions_def.get_partition_keys(current_time=now):
        tw = partitions_def.time_window_for_partition_key(key)
        out.append((key, _naive(tw.start), _naive(tw.end)))
    return out


def _naive(dt: datetime) -> datetime:
    return dt.astimezone(timezone.utc).replace(tzinfo=None)


def build_watermark_sensor(source: SourceConfig, partitions_def: dg.TimeWindowPartitionsDefinition) -> dg.SensorDefinition:
    asset_key = asset_key_for(source.id)

    @dg.sensor(
        name=f"harvest_{source.id}_watermark",
        target=[asset_key],
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=f"Keeps {source.id} in sync: launches closed windows since the watermark, advances it over verified ones.",
    )
    def watermark_sensor(context: dg.SensorEvaluationContext):
        now = datetime.now(timezone.utc)
        windows = closed_windows(partitions_def, now)
        # UI backfills launch runs without our tag, so match on the run's asset selection too.
        runs = context.instance.get_runs(filters=dg.RunsFilter(statuses=IN_FLIGHT), limit=1000)
        in_flight = {
            r.tags.get("dagster/partition")
            for r in runs
            if r.tags.get(SOURCE_TAG) == source.id or asset_key in (r.asset_selection or ())
        } - {None}
        try:
            with connect(wait_seconds=20) as con:
                rows = {r.window_start: r for r in ledger.list_windows(con, source.id)}
                watermark = ledger.get_watermark(con, source.id)
                new_watermark, launch = plan_tick(
                    windows=windows, ledger_rows=rows, watermark=watermark, in_flight=in_flight,
                    now=_naive(now), limit=source.max_windows_per_tick,
                )
                if new_watermark is not None and new_watermark != watermark:
                    ledger.set_watermark(con, source.id, new_watermark)
        except StoreLockedError as exc:
            return dg.SkipReason(f"catalogue busy, will try next tick: {exc}")
        cursor = json.dumps({"watermark": new_watermark.isoformat() if new_watermark else None, "launched": launch[:5]})
        if not launch:
            return dg.SensorResult(skip_reason=f"watermark {new_watermark}: nothing to launch", cursor=cursor)
        return dg.SensorResult(
            run_requests=[dg.RunRequest(partition_key=k, tags={SOURCE_TAG: source.id}) for k in launch],
            cursor=cursor,
        )

    return watermark_sensor
