"""Reconciliation per source: the `reconcile/<id>` asset, its blocking guard check, job and schedule."""

import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from harvest_pipeline.defs.assets import asset_key_for, pool_for
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.defs.sensors import SOURCE_TAG
from harvest_pipeline.errors import ConfigError
from harvest_pipeline.harvest.reconcile import reconcile_source
from harvest_pipeline.sources import SourceConfig

GUARD_CHECK = "mass_deletion_guard"


def reconcile_key(source_id: str) -> dg.AssetKey:
    return dg.AssetKey(["reconcile", source_id])


def reconcile_op_name(source_id: str) -> str:
    return f"reconcile__{source_id}"  # Dagster's op name for the asset key reconcile/<id>


def reconcile_job_name(source_id: str) -> str:
    return f"reconcile_{source_id}"


def reconcile_schedule_name(source_id: str) -> str:
    return f"reconcile_{source_id}_schedule"


def confirm_run_config(source_id: str) -> dict:
    """Run config that lets a reconciliation through its mass-deletion guard."""
    return {"ops": {reconcile_op_name(source_id): {"config": {"confirm_mass_deletion": True}}}}


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
        "are real, confirm them by materializing again with the run config "
        f"`ops: {{{reconcile_op_name(source.id)}: {{config: {{confirm_mass_deletion: true}}}}}}` "
        "(an incomplete listing cannot be confirmed: run it again)."
    )


def build_reconcile_asset(source: SourceConfig) -> dg.AssetsDefinition:
    key = reconcile_key(source.id)

    @dg.asset(
        key=key,
        deps=[asset_key_for(source.id)],
        check_specs=[dg.AssetCheckSpec(GUARD_CHECK, asset=key, blocking=True, description=guard_description(source))],
        pool=pool_for(source.id),
        group_name="reconcile",
        kinds={"duckdb"},
        tags={"harvest/protocol": source.protocol},
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
    def reconcile_asset(context: dg.AssetExecutionContext, config: ReconcileConfig, duckdb: DuckDBResource):
        def progress(event: dict) -> None:
            if event["pages"] % 50 == 1:
                context.log.info(f"{source.id}: listed {event['listed']} identifiers over {event['pages']} pages")

        report = reconcile_source(
            source, db_path=catalogue_path(duckdb), run_id=context.run.run_id,
            confirm_mass_deletion=config.confirm_mass_deletion, connect=catalogue_connector(duckdb),
            progress=progress,
        )
        (context.log.info if report.guard_passed else context.log.error)(f"{source.id}: {report.reason}")
        numbers = {
            "listed": report.listed,
            "upstream_live": report.upstream_live,
            "local_live": report.local_live,
            "missing": report.missing,
            "deleted": report.deleted,
        }
        yield dg.MaterializeResult(
            metadata={
                "status": report.status,
                **numbers,
                "verb": report.verb,
                "confirmed": report.confirmed,
                "seconds": round(report.seconds, 3),
                **({"completeListSize": report.complete_list_size} if report.complete_list_size is not None else {}),
                **({"missing_examples": dg.MetadataValue.json(report.examples)} if report.examples else {}),
            }
        )
        yield dg.AssetCheckResult(
            check_name=GUARD_CHECK,
            passed=report.guard_passed,
            severity=dg.AssetCheckSeverity.ERROR,
            description=report.reason,
            metadata={**numbers, "max_delete_fraction": report.max_delete_fraction, "status": report.status,
                      "confirmed": report.confirmed},
        )

    return reconcile_asset


def build_reconcile_job(source: SourceConfig):
    return dg.define_asset_job(
        reconcile_job_name(source.id),
        selection=dg.AssetSelection.assets(reconcile_key(source.id)),
        tags={SOURCE_TAG: source.id},
        description=f"Reconcile {source.id} with its upstream listing (deletion by absence, with the mass-deletion guard).",
    )


def build_reconcile_schedule(source: SourceConfig, job, deleted_record: str | None, how: str) -> dg.ScheduleDefinition:
    """Weekly by default (`reconcile.schedule`, UTC); RUNNING by default only where deletions can vanish."""
    needed = source.protocol == "csw" or deleted_record in ("no", "transient")
    why = (
        f"deletedRecord={deleted_record} ({how}): absent records are only found by reconciliation, so it runs by default"
        if needed
        else f"deletedRecord={deleted_record or '?'} ({how}): harvests see deletions as tombstones, so it is off by default; "
        "turn it on in the UI if the server loses deletions"
    )
    try:
        return dg.ScheduleDefinition(
            name=reconcile_schedule_name(source.id),
            cron_schedule=source.reconcile.schedule,
            job=job,
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
