"""Reconciliation: the `reconcile/<id>` assets (one multi-asset over every source, so a load
builds one op, not one per source), their blocking guard checks, the job `reconcile` and one
schedule per source (`reconcile_<id>_schedule`) that runs the job for that source's asset only."""

import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from harvest_pipeline.defs.assets import asset_key_for
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.defs.sensors import SOURCE_TAG
from harvest_pipeline.errors import ConfigError
from harvest_pipeline.harvest.source_lock import SourceLock
from harvest_pipeline.sources import SourceConfig

GUARD_CHECK = "mass_deletion_guard"
RECONCILE_JOB = "reconcile"
RECONCILE_OP = "reconcile_sources"  # op names must differ from job names within a code location


def reconcile_key(source_id: str) -> dg.AssetKey:
    return dg.AssetKey(["reconcile", source_id])


def reconcile_schedule_name(source_id: str) -> str:
    return f"reconcile_{source_id}_schedule"


def confirm_run_config() -> dict:
    """Run config that lets a reconciliation through its mass-deletion guard."""
    return {"ops": {RECONCILE_OP: {"config": {"confirm_mass_deletion": True}}}}


class ReconcileConfig(dg.Config):
    confirm_mass_deletion: bool = Field(
        default=False,
        description="Let this run delete more than reconcile.max_delete_fraction of the source's live "
        "records (or everything, when the server lists nothing). Only for a run you have checked.",
    )


def guard_description(source: SourceConfig) -> str:
    return (
        f"Blocks deletions by absence that look like an outage rather than real deletions: more than "
        f"{source.reconcile.max_delete_fraction:.0%} (reconcile.max_delete_fraction) of {source.id}'s live "
        "records missing upstream, an EMPTY upstream listing while the catalogue holds live records, or a "
        "listing shorter than its completeListSize. When it fails NOTHING is deleted. If the deletions "
        "are real, confirm them by materializing reconcile/" + source.id + " again with the run config "
        f"`ops: {{{RECONCILE_OP}: {{config: {{confirm_mass_deletion: true}}}}}}` "
        "(an incomplete listing cannot be confirmed: run it again)."
    )


def _spec(source: SourceConfig) -> dg.AssetSpec:
    return dg.AssetSpec(
        reconcile_key(source.id),
        deps=[asset_key_for(source.id)],
        group_name="reconcile",
        kinds={"duckdb"},
        tags={"harvest/protocol": source.protocol},
        skippable=True,
        description=(
            f"Deletion by absence for {source.id}: tombstones the live records its server no longer lists. "
            "For servers whose deletedRecord is 'no' or 'transient', and CSW.\n\n"
            "Lists every identifier upstream (ListIdentifiers, ListRecords where that fails) and tombstones "
            "the catalogue's live records missing from it (history action 'deleted', attempt_id "
            "'reconcile:<run id>').\n\n"
            f"- **Checks** tab: `{GUARD_CHECK}`, which deletes nothing when the deletions look like an outage.\n"
            f"- **Automation → reconcile_{source.id}_schedule**: weekly by default (`reconcile.schedule`).\n"
            "- **Overview → Metadata**: listed, upstream live, local live, missing, deleted."
        ),
    )


def build_reconcile_assets(sources: list[SourceConfig]) -> dg.AssetsDefinition | None:
    """One multi-asset: `reconcile/<id>` per source, run for the selected sources one after another."""
    if not sources:
        return None
    by_key = {reconcile_key(s.id): s for s in sources}

    @dg.multi_asset(
        name=RECONCILE_OP,
        specs=[_spec(s) for s in sources],
        check_specs=[
            dg.AssetCheckSpec(GUARD_CHECK, asset=reconcile_key(s.id), blocking=True, description=guard_description(s))
            for s in sources
        ],
        can_subset=True,
    )
    def reconcile_sources(context: dg.AssetExecutionContext, config: ReconcileConfig, duckdb: DuckDBResource):
        from harvest_pipeline.harvest.reconcile import reconcile_source

        failed = []
        for key in sorted(context.selected_asset_keys, key=lambda k: k.path):
            source = by_key[key]

            def progress(event: dict, source=source) -> None:
                if event["pages"] % 50 == 1:
                    context.log.info(f"{source.id}: listed {event['listed']} identifiers over {event['pages']} pages")

            # Never while the source's windows are being harvested (harvest/source_lock.py).
            lock = SourceLock(catalogue_path(duckdb), source.id)
            lock.acquire(on_wait=lambda source=source: context.log.info(
                f"{source.id}: waiting for the run harvesting its windows"))
            try:
                report = reconcile_source(
                    source, db_path=catalogue_path(duckdb), run_id=context.run.run_id,
                    confirm_mass_deletion=config.confirm_mass_deletion, connect=catalogue_connector(duckdb),
                    progress=progress,
                )
            except Exception as exc:  # noqa: BLE001 - the other selected sources still reconcile
                context.log.error(f"{source.id}: reconciliation failed: {exc}")
                failed.append(f"{source.id}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                continue
            finally:
                lock.release()
            (context.log.info if report.guard_passed else context.log.error)(f"{source.id}: {report.reason}")
            numbers = {
                "listed": report.listed,
                "upstream_live": report.upstream_live,
                "local_live": report.local_live,
                "missing": report.missing,
                "deleted": report.deleted,
            }
            yield dg.MaterializeResult(
                asset_key=key,
                metadata={
                    "status": report.status,
                    **numbers,
                    "verb": report.verb,
                    "confirmed": report.confirmed,
                    "seconds": round(report.seconds, 3),
                    **({"completeListSize": report.complete_list_size} if report.complete_list_size is not None else {}),
                    **({"missing_examples": dg.MetadataValue.json(report.examples)} if report.examples else {}),
                },
            )
            yield dg.AssetCheckResult(
                asset_key=key,
                check_name=GUARD_CHECK,
                passed=report.guard_passed,
                severity=dg.AssetCheckSeverity.ERROR,
                description=report.reason,
                metadata={**numbers, "max_delete_fraction": report.max_delete_fraction, "status": report.status,
                          "confirmed": report.confirmed},
            )
        if failed:
            raise dg.Failure(description="reconciliation failed for " + "; ".join(failed))

    return reconcile_sources


def build_reconcile_job():
    return dg.define_asset_job(
        RECONCILE_JOB,
        selection=dg.AssetSelection.groups("reconcile"),
        description="Reconcile sources with their upstream listing (deletion by absence, with the mass-deletion "
        "guard). Select the `reconcile/<id>` assets to run; each source's schedule selects its own.",
    )


def build_reconcile_schedule(source: SourceConfig, deleted_record: str | None, how: str) -> dg.ScheduleDefinition:
    """Weekly by default (`reconcile.schedule`, UTC); RUNNING by default only where deletions can vanish."""
    needed = source.protocol == "csw" or deleted_record in ("no", "transient")
    why = (
        f"deletedRecord={deleted_record} ({how}): absent records are only found by reconciliation, so it runs by default"
        if needed
        else f"deletedRecord={deleted_record or '?'} ({how}): harvests see deletions as tombstones, so it is off by default; "
        "turn it on in the UI if the server loses deletions"
    )
    key = reconcile_key(source.id)

    def request(context):
        return dg.RunRequest(asset_selection=[key], tags={SOURCE_TAG: source.id})

    try:
        return dg.ScheduleDefinition(
            name=reconcile_schedule_name(source.id),
            cron_schedule=source.reconcile.schedule,
            job_name=RECONCILE_JOB,
            execution_fn=request,
            execution_timezone="UTC",
            default_status=dg.DefaultScheduleStatus.RUNNING if needed else dg.DefaultScheduleStatus.STOPPED,
            description=f"Reconcile {source.id} on '{source.reconcile.schedule}' (UTC). {why}.",
            tags={SOURCE_TAG: source.id},
        )
    except dg.DagsterInvalidDefinitionError as exc:
        raise ConfigError(
            f"field 'reconcile.schedule': {source.reconcile.schedule!r} is not a valid cron schedule ({exc})",
            source_id=source.id,
        ) from None
