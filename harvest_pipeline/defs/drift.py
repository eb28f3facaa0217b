"""The drift audit in Dagster: assets `drift/<source>` (one multi-asset over every source) with
their check `counts_match`, the job `drift` and its daily schedule `drift_schedule`.

Each asset asks its server for its list sizes and compares them with the catalogue
(harvest/drift.py); the check's history on the asset's Checks tab is the audit's history.
The schedule runs every source's audit daily at 04:30 UTC and is on by default: it costs each
server at most three small requests (Identify and two first list pages).
"""

from concurrent.futures import ThreadPoolExecutor

import dagster as dg
from dagster_duckdb import DuckDBResource

from harvest_pipeline.defs.assets import asset_key_for
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.errors import HarvestError
from harvest_pipeline.harvest.source_lock import SourceLock
from harvest_pipeline.sources import SourceConfig

CHECK = "counts_match"
SCHEDULE = "30 4 * * *"
DRIFT_JOB = "drift"
DRIFT_SCHEDULE = "drift_schedule"
DRIFT_OP = "audit_drift"
AUDITS_AT_ONCE = 8
LOCK_WAIT_SECONDS = 600
CHECK_DESCRIPTION = (
    "The catalogue holds as many records as the server counts (completeListSize of an "
    "unwindowed list, or CSW hits), allowing for records changed since the watermark. A mismatch "
    "says what to do: reconcile (records deleted upstream without a tombstone) or a full harvest "
    "(records missing)."
)


def drift_key(source_id: str) -> dg.AssetKey:
    return dg.AssetKey(["drift", source_id])


def build_drift_defs(sources: list[SourceConfig]) -> tuple:
    """The multi-asset with one check per source, the job `drift` and its daily schedule."""
    if not sources:
        return None, None, None
    by_key = {drift_key(s.id): s for s in sources}

    @dg.multi_asset(
        name=DRIFT_OP,
        specs=[
            dg.AssetSpec(
                drift_key(s.id), deps=[asset_key_for(s.id)], group_name="audit", kinds={"duckdb"}, skippable=True,
                description=f"Drift audit of {s.id}: the server's own count of its records against the catalogue's. "
                "See the Checks tab for its history.",
            )
            for s in sources
        ],
        check_specs=[dg.AssetCheckSpec(CHECK, asset=drift_key(s.id), description=CHECK_DESCRIPTION) for s in sources],
        can_subset=True,
    )
    def drift_assets(context: dg.AssetExecutionContext, duckdb: DuckDBResource):
        from harvest_pipeline.harvest.drift import audit_drift

        def audit_one(key):
            source = by_key[key]
            # Never counted while the source's windows are being merged (harvest/source_lock.py).
            lock = SourceLock(catalogue_path(duckdb), source.id)
            if not lock.acquire(timeout=LOCK_WAIT_SECONDS):
                return HarvestError(f"its windows were being harvested for {LOCK_WAIT_SECONDS // 60} minutes; "
                                    "the next audit counts again", source_id=source.id)
            try:
                return audit_drift(source, db_path=catalogue_path(duckdb), connect=catalogue_connector(duckdb))
            except Exception as exc:  # noqa: BLE001 - the other sources are still audited
                return exc
            finally:
                lock.release()

        keys = sorted(context.selected_asset_keys, key=lambda k: k.path)
        failed = []
        # Each audit waits on its own server (three small requests): a few at once.
        with ThreadPoolExecutor(max_workers=AUDITS_AT_ONCE, thread_name_prefix="drift") as pool:
            audits = list(pool.map(audit_one, keys))
        for key, audit in zip(keys, audits):
            source = by_key[key]
            if isinstance(audit, Exception):
                context.log.error(f"{source.id}: drift audit failed: {audit}")
                failed.append(f"{source.id}: {str(audit).splitlines()[0] if str(audit) else type(audit).__name__}")
                continue
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
            yield dg.MaterializeResult(asset_key=key, metadata=meta)
            passed = audit.passed
            yield dg.AssetCheckResult(
                asset_key=key,
                check_name=CHECK,
                passed=bool(passed),
                severity=dg.AssetCheckSeverity.ERROR if passed is False else dg.AssetCheckSeverity.WARN,
                description=f"{audit.summary()}. {audit.advice()}" if passed is not True else audit.summary(),
                metadata={**meta, "advice": audit.advice(),
                          **({"in_step_from": bounds[0], "in_step_to": bounds[1]} if bounds else {})},
            )
        if failed:
            raise dg.Failure(description="drift audit failed for " + "; ".join(failed))

    job = dg.define_asset_job(
        DRIFT_JOB, selection=dg.AssetSelection.groups("audit"),
        description="Drift audit: each selected source's count of its records against the catalogue's.",
    )
    schedule = dg.ScheduleDefinition(
        name=DRIFT_SCHEDULE, cron_schedule=SCHEDULE, job=job, execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Drift audit of every source daily at 04:30 UTC (three small requests to each server).",
    )
    return drift_assets, job, schedule
