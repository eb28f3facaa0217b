"""The window asset factory: one `harvest/<source_id>` asset per source, partitioned by window."""


from datetime import datetime

import dagster as dg
from dagster_duckdb import DuckDBResource

from harvest_pipeline.defs.checks import check_result, check_specs
from harvest_pipeline.defs.partitions import partitions_for
from harvest_pipeline.defs.report import progress_logger, report_metadata
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.errors import DeferredError
from harvest_pipeline.harvest import Window, harvest_partition
from harvest_pipeline.sources import SourceConfig


def asset_key_for(source_id: str) -> dg.AssetKey:
    return dg.AssetKey(["harvest", source_id])


def pool_for(source_id: str) -> str:
    # One pool per source (limit 1 in dagster.yaml): a source's windows harvest one at a time,
    # which keeps us polite and its staging files uncontended, while sources run side by side.
    return f"harvest_{source_id}"


def _what(source: SourceConfig) -> str:
    if source.csw is not None:
        return (
            f"CSW GetRecords of {source.url} (typeNames={source.csw.type_names}, "
            f"outputSchema={source.csw.output_schema}, window on {source.csw.modified_queryable})"
        )
    return (
        f"OAI-PMH ListRecords of {source.url} (metadataPrefix={source.metadata_prefix}"
        f"{', set=' + source.set if source.set else ''})"
    )


def window_asset_description(source: SourceConfig, start_note: str) -> str:
    """What the asset is (the first line is what the asset catalog shows) and where to look next."""
    return (
        f"Harvests {source.id}: {_what(source)}, one {source.window} window per partition, upserted into "
        f"the DuckDB catalogue.\n\n"
        f"- **Partitions** tab: one per closed {source.window} window (first window: {start_note}). Select "
        "windows and *Materialize* to harvest them again; a range is typed with brackets, "
        "`[first...last]`.\n"
        "- **Checks** tab: `complete`, `no_duplicates` and `cursor_closed` for each window.\n"
        "- **Overview → Metadata → Plots**: records, live, deleted, pages and seconds per window. "
        "**Events**: what each run changed (created, updated, deletions as text) and the "
        "`changed_records` table.\n"
        f"- **Automation → harvest_{source.id}_watermark**: the sensor that launches closed windows and "
        "advances the watermark over verified ones.\n"
        f"- Shell: `harvest-pipeline status`, `harvest-pipeline show {source.id} IDENTIFIER`."
    )


def build_window_asset(source: SourceConfig, start: datetime, start_note: str) -> dg.AssetsDefinition:
    key = asset_key_for(source.id)
    partitions_def = partitions_for(source, start)

    @dg.asset(
        key=key,
        partitions_def=partitions_def,
        check_specs=check_specs(key, partitions_def),
        pool=pool_for(source.id),
        group_name="harvest",
        kinds={"duckdb", "csw" if source.protocol == "csw" else "oaipmh"},
        tags={"harvest/protocol": source.protocol},
        description=window_asset_description(source, start_note),
        metadata={"source_url": dg.MetadataValue.url(source.url), "window": source.window},
    )
    def window_asset(context: dg.AssetExecutionContext, duckdb: DuckDBResource):
        time_window = context.partition_time_window
        window = Window(time_window.start, time_window.end, context.partition_key)

        try:
            report = harvest_partition(
                source,
                window,
                run_id=context.run.run_id,
                db_path=catalogue_path(duckdb),
                connect=catalogue_connector(duckdb),
                progress=progress_logger(context, source.id),
            )
        except DeferredError as exc:
            # Not a verdict on the window: the sensor launches it again after the server's delay.
            raise dg.Failure(
                description=f"deferred: {exc}",
                metadata={"retry_after_seconds": round(exc.retry_after_seconds, 1)},
                allow_retries=False,
            ) from None
        yield dg.MaterializeResult(metadata=report_metadata(context, report))
        for name, verdict in report.checks.items():
            yield check_result(name, verdict)

    return window_asset
