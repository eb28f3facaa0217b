"""One-off jobs per source: re-harvest selected records (`harvest_<id>_records`) and full harvest
(`harvest_<id>_full`). Both are op jobs in the source's pool, so they never overlap its windows."""


import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from harvest_pipeline.defs.assets import pool_for
from harvest_pipeline.defs.report import progress_logger, report_metadata
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.defs.sensors import SOURCE_TAG
from harvest_pipeline.harvest.full import harvest_full
from harvest_pipeline.harvest.selected import harvest_selected
from harvest_pipeline.sources import SourceConfig


def records_job_name(source_id: str) -> str:
    return f"harvest_{source_id}_records"


def records_op_name(source_id: str) -> str:
    # Op names must differ from job names within a code location.
    return f"reharvest_records_{source_id}"


def full_job_name(source_id: str) -> str:
    return f"harvest_{source_id}_full"


def full_op_name(source_id: str) -> str:
    return f"full_harvest_{source_id}"


def records_run_config(source_id: str, identifiers: list[str]) -> dict:
    """The launchpad config of `harvest_<id>_records`."""
    return {"ops": {records_op_name(source_id): {"config": {"identifiers": list(identifiers)}}}}


class SelectedRecordsConfig(dg.Config):
    identifiers: list[str] = Field(description="OAI-PMH identifiers to fetch again with GetRecord")


def build_records_job(source: SourceConfig) -> dg.JobDefinition:
    @dg.op(
        name=records_op_name(source.id),
        pool=pool_for(source.id),
        description=(
            f"GetRecord each configured identifier of {source.id} and merge it into the catalogue "
            "(history rows carry this run's id). Identifiers the server does not know are reported "
            "and left untouched locally."
        ),
    )
    def reharvest_records(context: dg.OpExecutionContext, config: SelectedRecordsConfig, duckdb: DuckDBResource) -> dict:
        report = harvest_selected(
            source, config.identifiers, db_path=catalogue_path(duckdb), run_id=context.run.run_id,
            connect=catalogue_connector(duckdb),
        )
        for identifier in report.not_found:
            context.log.warning(f"{source.id}: {identifier}: idDoesNotExist upstream; the local record is left untouched")
        counts = report.counts
        summary = {
            "window": report.window.key,
            "requested": len(report.requested),
            "fetched": report.fetched,
            "not_found": report.not_found,
            "actions": report.actions,
        }
        context.add_output_metadata({
            "requested": len(report.requested),
            "fetched": report.fetched,
            "not_found": len(report.not_found),
            "created": counts.created,
            "updated": counts.updated,
            "unchanged": counts.unchanged,
            "deletions": counts.deleted,
            "revived": counts.revived,
            "restored": counts.restored,
            "actions": dg.MetadataValue.json(dict(list(report.actions.items())[:200])),
            **({"not_found_identifiers": dg.MetadataValue.json(report.not_found[:200])} if report.not_found else {}),
        })
        return summary

    @dg.job(
        name=records_job_name(source.id),
        tags={SOURCE_TAG: source.id},
        description=(
            f"Re-harvest selected records of {source.id} by identifier. Launchpad config: "
            f"ops: {{{records_op_name(source.id)}: {{config: {{identifiers: [oai:..., ...]}}}}}}"
        ),
    )
    def records_job():
        reharvest_records()

    return records_job


def build_full_job(source: SourceConfig) -> dg.JobDefinition:
    @dg.op(
        name=full_op_name(source.id),
        pool=pool_for(source.id),
        description=f"List all of {source.id} without from/until; staged, merged and verified like a window.",
    )
    def full_harvest(context: dg.OpExecutionContext, duckdb: DuckDBResource) -> dict:
        report = harvest_full(
            source, db_path=catalogue_path(duckdb), run_id=context.run.run_id,
            connect=catalogue_connector(duckdb), progress=progress_logger(context, source.id),
        )
        metadata = {"window": report.window.key, **report_metadata(context, report)}
        failed = {n: c.description for n, c in report.checks.items() if not c.passed and c.severity == "error"}
        if failed:
            raise dg.Failure(
                description=f"full harvest of {source.id} failed its checks: "
                + "; ".join(f"{n}: {d}" for n, d in failed.items()),
                metadata=metadata,
            )
        context.add_output_metadata(metadata)
        # The op's output (read by `harvest --full`): plain values, the preview table left out.
        plain = {k: v.value if isinstance(v, dg.MetadataValue) else v for k, v in metadata.items()}
        plain = {k: v for k, v in plain.items() if isinstance(v, (str, int, float, bool))}
        return {**plain, "checks": {n: c.passed for n, c in report.checks.items()}}

    @dg.job(
        name=full_job_name(source.id),
        tags={SOURCE_TAG: source.id},
        description=(
            f"Harvest all of {source.id} in one listing without from/until (window full-<time>). "
            "Fails when a check (complete, no_duplicates, cursor_closed) fails."
        ),
    )
    def full_job():
        full_harvest()

    return full_job
