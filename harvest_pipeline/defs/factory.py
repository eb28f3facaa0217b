"""Build the definitions from the sources file and the stored server facts: no network, ever.

Per source: the window asset `harvest/<id>` (partitioned by window, with its checks), the
reconciliation asset `reconcile/<id>` and the drift audit `drift/<id>` (each one spec of a
multi-asset over all sources), and the schedule `reconcile_<id>_schedule`. Across sources: the
batch job `harvest_windows` launched by the one sensor `harvest_watermarks`; the jobs
`harvest_records`, `harvest_full`, `remap_records`, `reconcile`, `drift` (schedule `drift_schedule`); the `catalog`
asset (job `catalog_refresh_job`, sensor `catalog_refresh`); `server_facts_refresh` (schedule
`server_facts_refresh_schedule`), which stores what each server says about itself; and
`register_source`.

Everything per source is one definition object, because every load (each run process, each
code-server start and reload) builds them all: jobs shared by every source take the source from
their run config instead.
"""

from __future__ import annotations

import warnings

import dagster as dg

from harvest_pipeline.defs.assets import asset_key_for, build_window_asset
from harvest_pipeline.defs.batch import build_batch_job
from harvest_pipeline.defs.catalog import (
    build_catalog_asset,
    build_catalog_job,
    build_catalog_sensor,
)
from harvest_pipeline.defs.drift import build_drift_defs
from harvest_pipeline.defs.facts import build_facts_job, build_facts_schedule
from harvest_pipeline.defs.jobs import build_full_job, build_records_job, build_remap_job
from harvest_pipeline.defs.partitions import partitions_for
from harvest_pipeline.defs.reconcile import build_reconcile_assets, build_reconcile_job, build_reconcile_schedule
from harvest_pipeline.defs.register import register_source
from harvest_pipeline.defs.resources import catalogue_resource
from harvest_pipeline.defs.sensors import build_watermark_sensor
from harvest_pipeline.defs.start_dates import UNKNOWN, deleted_record_policy, resolve_start
from harvest_pipeline.harvest.server_facts import read_facts
from harvest_pipeline.sources import SourceConfig, load_sources
from harvest_pipeline.store import default_db_path

# Dagster 1.13 copies every sensor it resolves against its jobs with `owners=[]`, and warns that the
# (unused) parameter is beta, once per sensor and process: noise in every log and in the CLI's
# output, nothing to act on. Here, not in definitions.py: the CLI builds its definitions directly.
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer `SensorDefinition", category=dg.BetaWarning)


def window_job(defs: dg.Definitions, source_id: str) -> dg.JobDefinition:
    """The job that materializes windows of one source (the asset job of `harvest/<id>` alone):
    what the UI runs when a partition is materialized, and what the CLI runs."""
    key = asset_key_for(source_id)
    return defs.resolve_implicit_job_def_def_for_assets([key]).get_subset(asset_selection={key})


def build_definitions(sources: list[SourceConfig] | None = None) -> dg.Definitions:
    """Every definition from the sources file and the stored server facts: no network, ever."""
    sources = load_sources() if sources is None else sources
    db_path = default_db_path().resolve()
    facts_job = build_facts_job(sources)
    assets, schedules = [], [build_facts_schedule(facts_job)]
    partitions_by_source, unknown_start = {}, set()
    for source in sources:
        facts = read_facts(source, db_path)
        start, note = resolve_start(source, facts)
        if note.startswith(UNKNOWN):
            unknown_start.add(source.id)
        partitions_by_source[source.id] = partitions_for(source, start)
        assets.append(build_window_asset(source, start, note))
        deleted_record, how = deleted_record_policy(source, facts)
        schedules.append(build_reconcile_schedule(source, deleted_record, how))

    batch_job = build_batch_job(sources, partitions_by_source)
    jobs = [facts_job, batch_job, build_records_job(sources), build_full_job(sources), build_remap_job(sources),
            build_reconcile_job()]
    sensors = [build_watermark_sensor(sources, partitions_by_source, batch_job, facts_job,
                                      db_path=db_path, unknown_start=unknown_start)]
    reconcile_assets = build_reconcile_assets(sources)
    drift_assets, drift_job, drift_schedule = build_drift_defs(sources)
    if reconcile_assets is not None:
        assets += [reconcile_assets, drift_assets]
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
