"""Build every source's assets, jobs, sensors and schedules from the sources file.

Per source: the window asset `harvest/<id>` (job `harvest_<id>`, sensor `harvest_<id>_watermark`),
the one-off jobs `harvest_<id>_records` and `harvest_<id>_full`, and the reconciliation asset
`reconcile/<id>` (job `reconcile_<id>`, schedule `reconcile_<id>_schedule`), and the drift audit
`drift/<id>` (job `drift_<id>`, schedule `drift_<id>_schedule`). Across sources: the
`catalog` asset (job `catalog_refresh_job`, sensor `catalog_refresh`), and the job
`server_facts_refresh` (schedule `server_facts_refresh_schedule`) that stores what each server
says about itself, which is all the definitions read about the servers.
"""

from __future__ import annotations

import dagster as dg

from harvest_pipeline.defs.assets import asset_key_for, build_window_asset
from harvest_pipeline.defs.catalog import (
    build_catalog_asset,
    build_catalog_job,
    build_catalog_sensor,
)
from harvest_pipeline.defs.drift import build_drift_defs
from harvest_pipeline.defs.jobs import build_full_job, build_records_job
from harvest_pipeline.defs.partitions import partitions_for
from harvest_pipeline.defs.facts import build_facts_job, build_facts_schedule
from harvest_pipeline.defs.reconcile import (
    build_reconcile_asset,
    build_reconcile_job,
    build_reconcile_schedule,
)
from harvest_pipeline.defs.register import register_source
from harvest_pipeline.defs.resources import catalogue_resource
from harvest_pipeline.defs.sensors import SOURCE_TAG, build_watermark_sensor
from harvest_pipeline.defs.start_dates import UNKNOWN, deleted_record_policy, resolve_start
from harvest_pipeline.harvest.server_facts import read_facts
from harvest_pipeline.sources import SourceConfig, load_sources
from harvest_pipeline.store import default_db_path


def job_name(source_id: str) -> str:
    return f"harvest_{source_id}"


def build_definitions(sources: list[SourceConfig] | None = None) -> dg.Definitions:
    """Every definition from the sources file and the stored server facts: no network, ever."""
    sources = load_sources() if sources is None else sources
    db_path = default_db_path().resolve()
    facts_job = build_facts_job(sources)
    assets, jobs, sensors, schedules = [], [facts_job], [], [build_facts_schedule(facts_job)]
    for source in sources:
        facts = read_facts(source, db_path)
        start, note = resolve_start(source, facts)
        asset = build_window_asset(source, start, note)
        assets.append(asset)
        window_job = dg.define_asset_job(
            job_name(source.id),
            selection=dg.AssetSelection.assets(asset_key_for(source.id)),
            tags={SOURCE_TAG: source.id},
            description=f"Harvest windows of {source.id} (pick the window in the partition selector).",
        )
        jobs.append(window_job)
        sensors.append(build_watermark_sensor(
            source, partitions_for(source, start), window_job, facts_job,
            db_path=db_path, start_known=not note.startswith(UNKNOWN),
        ))
        jobs += [build_records_job(source), build_full_job(source)]

        assets.append(build_reconcile_asset(source))
        reconcile_job = build_reconcile_job(source)
        jobs.append(reconcile_job)
        deleted_record, how = deleted_record_policy(source, facts)
        schedules.append(build_reconcile_schedule(source, reconcile_job, deleted_record, how))
        drift_asset, drift_job, drift_schedule = build_drift_defs(source)  # the drift audit, defs/drift.py
        assets.append(drift_asset)
        jobs.append(drift_job)
        schedules.append(drift_schedule)

    assets.append(build_catalog_asset(sources))
    catalog_job = build_catalog_job()
    jobs.append(catalog_job)
    sensors.append(build_catalog_sensor(catalog_job))
    jobs.append(register_source)
    return dg.Definitions(
        assets=assets,
        jobs=jobs,
        sensors=sensors,
        schedules=schedules,
        resources={"duckdb": catalogue_resource()},
        # Windows of a run run one after another in one step: a subprocess per step would only add overhead.
        executor=dg.in_process_executor,
    )
