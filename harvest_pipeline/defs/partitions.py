"""A source's harvest windows as a Dagster time-window partitions definition (UTC)."""

from __future__ import annotations

from bisect import bisect_left
from datetime import datetime, timedelta, timezone

import dagster as dg

from harvest_pipeline.sources import SourceConfig


def floor_to_window(ts: datetime, window: str) -> datetime:
    ts = ts.astimezone(timezone.utc)
    if window == "hour":
        return ts.replace(minute=0, second=0, microsecond=0)
    day = ts.replace(hour=0, minute=0, second=0, microsecond=0)
    if window == "day":
        return day
    if window == "week":  # ISO weeks: Monday 00:00 UTC
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def partitions_for(source: SourceConfig, start: datetime) -> dg.TimeWindowPartitionsDefinition:
    """Closed windows only (end_offset=0): an open window would be harvested before it is complete."""
    start = floor_to_window(start, source.window)
    if source.window == "hour":
        return dg.HourlyPartitionsDefinition(start_date=start.strftime("%Y-%m-%d-%H:%M"), timezone="UTC")
    if source.window == "day":
        return dg.DailyPartitionsDefinition(start_date=start.strftime("%Y-%m-%d"), timezone="UTC")
    if source.window == "week":
        return dg.WeeklyPartitionsDefinition(start_date=start.strftime("%Y-%m-%d"), day_offset=1, timezone="UTC")
    return dg.MonthlyPartitionsDefinition(start_date=start.strftime("%Y-%m-%d"), timezone="UTC")


def closed_windows(
    partitions_def: dg.TimeWindowPartitionsDefinition, now: datetime, since: datetime | None = None
) -> list[tuple[str, datetime, datetime]]:
    """(key, start, end) of every closed window starting at or after `since`, naive UTC, in time order.

    From `since` on only: a sensor tick of a source with years of windows stays cheap.
    """
    last = partitions_def.get_last_partition_key()  # at the current time, like `now`
    if last is None:
        return []
    keys = None
    if since is not None:
        since_key = since.strftime(partitions_def.fmt)
        if since_key > last:
            return []
        try:
            # The watermark is a window boundary, so its text is a partition key.
            partitions_def.time_window_for_partition_key(since_key)
            keys = partitions_def.get_partition_keys_in_range(dg.PartitionKeyRange(since_key, last))
        except Exception:  # noqa: BLE001 - before the first window, or not a boundary (window changed)
            keys = None
    if keys is None:
        keys = partitions_def.get_partition_keys(current_time=now)
        if since is not None:
            # Keys are zero-padded dates: their text order is their time order.
            keys = keys[bisect_left(keys, since.strftime(partitions_def.fmt)):]
    out = []
    for key in keys:
        tw = partitions_def.time_window_for_partition_key(key)
        out.append((key, _naive(tw.start), _naive(tw.end)))
    return out


def _naive(dt: datetime) -> datetime:
    return dt.astimezone(timezone.utc).replace(tzinfo=None)
