"""The `server_facts_refresh` job and its daily schedule: ask each server about itself, store it.

Definitions are built from stored facts only (harvest/server_facts.py). This job is how they are
refreshed from Dagster: daily by its schedule, on request of a source's sensor while its facts
are unknown, or by hand. When new facts change what the definitions look like (a first
partitions start, an earlier one, another deletedRecord), the code location must reload to show
it: the job asks the webserver to reload when `HARVEST_DAGSTER_WEBSERVER` (host:port, set by
`harvest-pipeline dev`) says where it is, and otherwise logs that a reload is needed.
"""


import os

import dagster as dg
from pydantic import Field

from harvest_pipeline.defs.resources import catalogue_path
from harvest_pipeline.harvest.server_facts import refresh_facts
from harvest_pipeline.sources import SourceConfig

FACTS_JOB = "server_facts_refresh"
FACTS_OP = "refresh_server_facts"
FACTS_SCHEDULE = "server_facts_refresh_schedule"
WEBSERVER_ENV = "HARVEST_DAGSTER_WEBSERVER"
DEFAULT_LOCATION = "harvest_pipeline"  # workspace.yaml's location_name


class FactsRefreshConfig(dg.Config):
    source_ids: list[str] = Field(default_factory=list, description="sources to refresh; empty = every source")


def facts_run_config(source_ids: list[str]) -> dict:
    return {"ops": {FACTS_OP: {"config": {"source_ids": list(source_ids)}}}}


def build_facts_job(sources: list[SourceConfig]) -> dg.JobDefinition:
    by_id = {s.id: s for s in sources}

    @dg.op(
        name=FACTS_OP,
        required_resource_keys={"duckdb"},
        description="Ask each selected server what it says about itself (OAI-PMH Identify; CSW GetCapabilities "
        "and earliest record) and store it in server_facts/<source>.json beside the catalogue.",
    )
    def refresh_server_facts(context: dg.OpExecutionContext, config: FactsRefreshConfig) -> dict:
        db_path = catalogue_path(context.resources.duckdb)
        unknown = [i for i in config.source_ids if i not in by_id]
        if unknown:
            raise dg.Failure(f"unknown source(s) {', '.join(unknown)}; known: {', '.join(sorted(by_id))}")
        chosen = [by_id[i] for i in config.source_ids] if config.source_ids else list(by_id.values())
        changed, failed = [], {}
        for source in chosen:
            try:
                facts, shapes = refresh_facts(source, db_path, learned_by=f"job {FACTS_JOB} (run {context.run_id[:8]})")
            except Exception as exc:  # noqa: BLE001 - one dead server must not stop the others
                failed[source.id] = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                context.log.warning(f"{source.id}: server facts not refreshed: {failed[source.id]}")
                continue
            context.log.info(
                f"{source.id}: granularity {facts.granularity}, earliest {facts.earliest_datestamp}, "
                f"deletedRecord {facts.deleted_record}, partitions start {facts.partitions_start}"
            )
            if shapes:
                changed.append(source.id)
        if changed:
            context.log.info(f"definitions change for {', '.join(changed)}: {reload_code_location(context)}")
        if failed and len(failed) == len(chosen):
            raise dg.Failure(
                "no server answered: " + "; ".join(f"{k}: {v}" for k, v in failed.items()),
                metadata={"failed": dg.MetadataValue.json(failed)},
            )
        context.add_output_metadata({"refreshed": len(chosen) - len(failed), "changed": len(changed),
                                     "failed": dg.MetadataValue.json(failed)})
        return {"changed": changed, "failed": failed}

    @dg.job(
        name=FACTS_JOB,
        description="Refresh the stored server facts (Identify / GetCapabilities) of every source, or of the "
        "configured source_ids; reloads the code location when the partitions change.",
    )
    def facts_job():
        refresh_server_facts()

    return facts_job


def build_facts_schedule(job: dg.JobDefinition) -> dg.ScheduleDefinition:
    return dg.ScheduleDefinition(
        name=FACTS_SCHEDULE,
        cron_schedule="30 2 * * *",
        job=job,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Daily at 02:30 UTC: refresh every source's server facts (one to three small requests per "
        "server). Loading the definitions never asks the servers.",
    )


def reload_code_location(context) -> str:
    """Ask the webserver to reload this code location; say what happened (never raises)."""
    where = os.environ.get(WEBSERVER_ENV)
    if not where:
        return "reload the code location (Deployment > Reload in the UI) to see it"
    origin = context.dagster_run.remote_job_origin
    location = origin.location_name if origin is not None else DEFAULT_LOCATION
    host, _, port = where.rpartition(":")
    try:
        from dagster_graphql import DagsterGraphQLClient

        info = DagsterGraphQLClient(host or "127.0.0.1", port_number=int(port), timeout=60).reload_repository_location(location)
    except Exception as exc:  # noqa: BLE001 - best effort: say what to do instead
        return f"could not ask {where} to reload ({exc}); reload the code location by hand"
    return f"asked {where} to reload code location {location}: {info.status.value}"
