"""The drift audit in Dagster: asset `drift/<source>` with its check `counts_match`, job and schedule.

The asset asks the server for its list sizes and compares them with the catalogue
(harvest/drift.py); the check's history on the asset's Checks tab is the audit's history.
It runs in the source's pool, so it never counts while one of the source's windows is merging.
The schedule `drift_<source>_schedule` runs it daily at 04:30 UTC and is on by default: it costs
the server at most three small requests (Identify and two first list pages).
"""

import dagster as dg
from dagster_duckdb import DuckDBResource

from harvest_pipeline.defs.assets import asset_key_for, pool_for
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.defs.sensors import SOURCE_TAG
from harvest_pipeline.harvest.drift import audit_drift
from harvest_pipeline.sources import SourceConfig

CHECK = "counts_match"
SCHEDULE = "30 4 * * *"


def drift_key(source_id: str) -> dg.AssetKey:
    return dg.AssetKey(["drift", source_id])


def build_drift_defs(source: SourceConfig) -> tuple:
    """The asset with its check, the job `drift_<id>` and its daily schedule."""
    key = drift_key(source.id)

    @dg.asset(
        key=key,
        deps=[asset_key_for(source.id)],
        check_specs=[dg.AssetCheckSpec(
            CHECK, asset=key,
            description="The catalogue holds as many records as the server counts (completeListSize of an "
            "unwindowed list, or CSW hits), allowing for records changed since the watermark. A mismatch "
            "says what to do: reconcile (records deleted upstream without a tombstone) or a full harvest "
            "(records missing).",
        )],
        pool=pool_for(source.id),
        group_name="audit",
        kinds={"duckdb"},
        description=f"Drift audit of {source.id}: the server's own count of its records against the catalogue's. "
        "See the Checks tab for its history.",
    )
    def drift_asset(context: dg.AssetExecutionContext, duckdb: DuckDBResource):
        audit = audit_drift(source, db_path=catalogue_path(duckdb), connect=catalogue_connector(duckdb))
        bounds = audit.expected_range
        meta = {
            "server_count": audit.upstream.size if audit.upstream.size is not None else "(none given)",
            "verb": audit.upstream.verb,
            "changed_since_watermark": audit.recent.size if audit.recent is not None and audit.recent.size is not None else "(not asked)",
            "catalogue_count": audit.local,
            "catalogue_live": audit.local_live,
            "catalogue_deleted": audit.local_deleted,
            "deleted_record": audit.deleted_record or "(unknown)",
            "compared": audit.what,
        }
        for note in audit.notes:
            context.log.warning(f"{source.id}: {note}")
        yield dg.MaterializeResult(metadata=meta)
        passed = audit.passed
        yield dg.AssetCheckResult(
            check_name=CHECK,
            passed=bool(passed),
            severity=dg.AssetCheckSeverity.ERROR if passed is False else dg.AssetCheckSeverity.WARN,
            description=f"{audit.summary()}. {audit.advice()}" if passed is not True else audit.summary(),
            metadata={**meta, "advice": audit.advice(),
                      **({"in_step_from": bounds[0], "in_step_to": bounds[1]} if bounds else {})},
        )

    job = dg.define_asset_job(
        f"drift_{source.id}", selection=dg.AssetSelection.assets(key), tags={SOURCE_TAG: source.id},
        description=f"Drift audit of {source.id}: the server's count of its records against the catalogue's.",
    )
    schedule = dg.ScheduleDefinition(
        name=f"drift_{source.id}_schedule", cron_schedule=SCHEDULE, job=job, execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description=f"Drift audit of {source.id} daily at 04:30 UTC (three small requests to the server).",
    )
    return drift_asset, job, schedule
