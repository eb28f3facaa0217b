"""Build every source's asset, job and sensor from the sources file."""

from __future__ import annotations

import dagster as dg

from harvest_pipeline.defs.assets import asset_key_for, build_window_asset
from harvest_pipeline.defs.partitions import partitions_for
from harvest_pipeline.defs.resources import catalogue_resource
from harvest_pipeline.defs.sensors import SOURCE_TAG, build_watermark_sensor
from harvest_pipeline.defs.start_dates import resolve_start
from harvest_pipeline.sources import SourceConfig, load_sources
from harvest_pipeline.store import default_db_path


def job_name(source_id: str) -> str:
    return f"harvest_{source_id}"


def build_definitions(sources: list[SourceConfig] | None = None) -> dg.Definitions:
    sources = load_sources() if sources is None else sources
    db_path = default_db_path().resolve()
    assets, jobs, sensors = [], [], []
    for source in sources:
        start, note = resolve_start(source, db_path)
        asset = build_window_asset(source, start, note)
        assets.append(asset)
        jobs.append(
            dg.define_asset_job(
                job_name(source.id),
                selection=dg.AssetSelection.assets(asset_key_for(source.id)),
                tags={SOURCE_TAG: source.id},
                description=f"Harvest windows of {source.id} (pick the window in the partition selector).",
            )
        )
        sensors.append(build_watermark_sensor(source, partitions_for(source, start)))
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        sensors=sensors,
        resources={"duckdb": catalogue_resource()},
        # One step per window (asset + its checks): a subprocess per step would only add overhead.
        executor=dg.in_process_executor,
    )
