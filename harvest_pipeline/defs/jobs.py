"""The one-off jobs shared by every source: re-harvest selected records (`harvest_records`), a
full harvest (`harvest_full`) and a remap of the stored records (`remap_records`). The source is
part of the run config, so 200 sources cost three job definitions, not 600 (each one is built at
every load of the definitions)."""


import time

import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from harvest_pipeline.defs.report import LOG_EVERY_SECONDS, progress_logger, report_metadata
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.defs.sensors import SOURCE_TAG
from harvest_pipeline.harvest import stop
from harvest_pipeline.harvest.progress import notify
from harvest_pipeline.sources import SourceConfig

RECORDS_JOB = "harvest_records"
RECORDS_OP = "reharvest_records"  # op names must differ from job names within a code location
FULL_JOB = "harvest_full"
FULL_OP = "full_harvest"
REMAP_JOB = "remap_records"
REMAP_OP = "remap_stored_records"


def records_run_config(source_id: str, identifiers: list[str]) -> dict:
    """The launchpad config of `harvest_records`."""
    return {"ops": {RECORDS_OP: {"config": {"source": source_id, "identifiers": list(identifiers)}}}}


def full_run_config(source_id: str) -> dict:
    """The launchpad config of `harvest_full`."""
    return {"ops": {FULL_OP: {"config": {"source": source_id}}}}


def remap_run_config(source_id: str, dry_run: bool = False) -> dict:
    """The launchpad config of `remap_records`."""
    return {"ops": {REMAP_OP: {"config": {"source": source_id, "dry_run": dry_run}}}}


def _source(sources: dict[str, SourceConfig], source_id: str) -> SourceConfig:
    try:
        return sources[source_id]
    except KeyError:
        raise dg.Failure(
            description=f"unknown source {source_id!r}: the sources file has {', '.join(sorted(sources)) or 'none'}",
            allow_retries=False,
        ) from None


class SelectedRecordsConfig(dg.Config):
    source: str = Field(description="the source's id, as in the sources file")
    identifiers: list[str] = Field(description="identifiers to fetch again (GetRecord; GetRecordById for a CSW source)")


class FullHarvestConfig(dg.Config):
    source: str = Field(description="the source's id, as in the sources file")


class RemapConfig(dg.Config):
    source: str = Field(description="the source's id, as in the sources file")
    dry_run: bool = Field(default=False, description="only report what would change; write nothing")


def build_records_job(sources: list[SourceConfig]) -> dg.JobDefinition:
    by_id = {s.id: s for s in sources}

    @dg.op(
        name=RECORDS_OP,
        description=(
            "Fetch each configured identifier of the configured source again (GetRecord; GetRecordById for CSW) and merge it into the "
            "catalogue (history rows carry this run's id). Identifiers the server does not know are "
            "reported and left untouched locally."
        ),
    )
    def reharvest_records(context: dg.OpExecutionContext, config: SelectedRecordsConfig, duckdb: DuckDBResource) -> dict:
        from harvest_pipeline.harvest.selected import harvest_selected

        source = _source(by_id, config.source)
        # Under `harvest-pipeline harvest`, SIGTERM/SIGINT end the fetching after the current record.
        with stop.handling_signals():
            report = harvest_selected(
                source, config.identifiers, db_path=catalogue_path(duckdb), run_id=context.run.run_id,
                connect=catalogue_connector(duckdb),
            )
        if report.not_fetched:
            context.log.warning(f"{source.id}: stopped by {stop.signal_name(report.stopped_by)}: "
                                f"{len(report.not_fetched)} identifier(s) not fetched")
        for identifier in report.not_found:
            context.log.warning(f"{source.id}: {identifier}: idDoesNotExist upstream; the local record is left untouched")
        for warning in report.warnings:
            context.log.warning(f"{source.id}: {warning}")
        counts = report.counts
        summary = {
            "source": source.id,
            "window": report.window.key,
            "verb": report.verb,
            "requested": len(report.requested),
            "fetched": report.fetched,
            "not_found": report.not_found,
            "not_fetched": report.not_fetched,
            "stopped_by": report.stopped_by,
            "actions": report.actions,
            "warnings": report.warnings,
        }
        context.add_output_metadata({
            "source": source.id,
            "requested": len(report.requested),
            "fetched": report.fetched,
            "not_found": len(report.not_found),
            **({"not_fetched": len(report.not_fetched)} if report.not_fetched else {}),
            "created": counts.created,
            "updated": counts.updated,
            "unchanged": counts.unchanged,
            "deletions": counts.deleted,
            "revived": counts.revived,
            "restored": counts.restored,
            "actions": dg.MetadataValue.json(dict(list(report.actions.items())[:200])),
            **({"not_found_identifiers": dg.MetadataValue.json(report.not_found[:200])} if report.not_found else {}),
            **({"warnings": dg.MetadataValue.text("\n".join(report.warnings))} if report.warnings else {}),
        })
        return summary

    @dg.job(
        name=RECORDS_JOB,
        description=(
            "Re-harvest selected records of one source by identifier. Launchpad config: "
            f"ops: {{{RECORDS_OP}: {{config: {{source: <id>, identifiers: [oai:..., ...]}}}}}}"
        ),
    )
    def records_job():
        reharvest_records()

    return records_job


def build_full_job(sources: list[SourceConfig]) -> dg.JobDefinition:
    by_id = {s.id: s for s in sources}

    @dg.op(
        name=FULL_OP,
        description="List all of the configured source without from/until; staged, merged and verified like a window.",
    )
    def full_harvest(context: dg.OpExecutionContext, config: FullHarvestConfig, duckdb: DuckDBResource) -> dict:
        from harvest_pipeline.harvest.full import harvest_full

        source = _source(by_id, config.source)
        # Under `harvest-pipeline harvest`, SIGTERM/SIGINT stop at the next page boundary.
        try:
            with stop.handling_signals():
                report = harvest_full(
                    source, db_path=catalogue_path(duckdb), run_id=context.run.run_id,
                    connect=catalogue_connector(duckdb), progress=progress_logger(context, source.id),
                )
        except stop.HarvestStopped as exc:
            raise dg.Failure(
                description=f"stopped by {stop.signal_name(exc.signum)}; the pages received are committed and the "
                "full harvest resumes from its last committed page when it runs again",
                allow_retries=False,
            ) from None
        metadata = {"source": source.id, "window": report.window.key, **report_metadata(context, report)}
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
        name=FULL_JOB,
        description=(
            "Harvest all of one source in one listing without from/until (window full-<time>). "
            f"Launchpad config: ops: {{{FULL_OP}: {{config: {{source: <id>}}}}}}. "
            "Fails when a check (complete, no_duplicates, cursor_closed) fails."
        ),
    )
    def full_job():
        full_harvest()

    return full_job


def build_remap_job(sources: list[SourceConfig]) -> dg.JobDefinition:
    by_id = {s.id: s for s in sources}

    @dg.op(
        name=REMAP_OP,
        description=(
            "Map every live record of the configured source again from its stored raw XML, with today's mappers, "
            "and rewrite those whose mapped columns change (history action 'restored', attempt 'remap:<run id>'). "
            "No request goes to the server."
        ),
    )
    def remap_stored_records(context: dg.OpExecutionContext, config: RemapConfig, duckdb: DuckDBResource) -> dict:
        from harvest_pipeline.harvest.remap import remap_source

        source = _source(by_id, config.source)
        last_line = [time.monotonic()]

        def progress(event: dict) -> None:  # a line every few seconds: each line is an event stored
            notify(event)  # the CLI's progress line
            if time.monotonic() - last_line[0] >= LOG_EVERY_SECONDS:
                last_line[0] = time.monotonic()
                context.log.info(f"{source.id} {event['window']}: {event['examined']} records examined, "
                                 f"{event['changed']} mapped differently")

        report = remap_source(source, db_path=catalogue_path(duckdb), run_id=context.run.run_id,
                              connect=catalogue_connector(duckdb), dry_run=config.dry_run, progress=progress)
        for warning in report.warnings:
            context.log.warning(f"{source.id}: {warning}")
        summary = {
            "source": source.id,
            "window": report.window.key,
            "dry_run": report.dry_run,
            "examined": report.examined,
            "changed": report.changed,
            "written": report.counts.restored if report.counts else 0,
            "stale": report.counts.stale if report.counts else 0,
            "now_mapped": report.now_mapped,
            "now_unmapped": report.now_unmapped,
            "formats": dict(report.formats.most_common()),
            "columns": dict(report.columns.most_common()),
            "examples": report.examples,
            "seconds": round(report.seconds, 1),
        }
        context.add_output_metadata({
            **{k: v for k, v in summary.items() if isinstance(v, (str, int, float, bool))},
            "formats": dg.MetadataValue.json(summary["formats"]),
            "columns": dg.MetadataValue.json(summary["columns"]),
            "examples": dg.MetadataValue.json(report.examples),
        })
        return summary

    @dg.job(
        name=REMAP_JOB,
        description=(
            "Map the stored records of one source again from their raw XML after a mapper changed (no request to "
            f"the server). Launchpad config: ops: {{{REMAP_OP}: {{config: {{source: <id>, dry_run: false}}}}}}"
        ),
    )
    def remap_job():
        remap_stored_records()

    return remap_job


def source_tags(source_id: str) -> dict[str, str]:
    """Tags of a one-off run, so the Runs list can be filtered by source."""
    return {SOURCE_TAG: source_id}
