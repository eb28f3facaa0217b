"""The `catalog` asset (view, source_stats, Parquet exports) and the sensor that keeps it fresh.

Refresh: the sensor `catalog_refresh` (running by default, every 60 s) reads a cheap fingerprint
of the catalogue (record counts and the last write time) and requests a `catalog` run when it
differs from the last one it saw. It therefore reacts to every kind of write (window harvests,
full harvests, re-harvests of selected records, reconciliations, the CLI) and not only to asset
materializations, which the op jobs do not emit.
"""


import json
import time

import dagster as dg
import duckdb as duckdb_module
from dagster_duckdb import DuckDBResource

from harvest_pipeline.defs.assets import asset_key_for
from harvest_pipeline.defs.batch import BATCH_JOB
from harvest_pipeline.defs.sensors import IN_FLIGHT
from harvest_pipeline.defs.reconcile import reconcile_key
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.errors import HarvestError
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect, transaction
from harvest_pipeline.store.catalog import (
    catalog_fingerprint,
    export_parquet,
    exports_dir,
    refresh_catalog,
)
from harvest_pipeline.store.preview import latest_records

CATALOG_KEY = dg.AssetKey(["catalog"])
CATALOG_JOB = "catalog_refresh_job"
CATALOG_SENSOR = "catalog_refresh"
REFRESH_WHILE_HARVESTING_SECONDS = 600
LATEST_PER_SOURCE = 5
LATEST_SCHEMA = dg.TableSchema(
    columns=[
        dg.TableColumn("source_id", "string"),
        dg.TableColumn("identifier", "string"),
        dg.TableColumn("datestamp", "string", description="UTC"),
        dg.TableColumn("title", "string"),
    ]
)


def build_catalog_asset(sources: list[SourceConfig]) -> dg.AssetsDefinition:
    source_ids = [s.id for s in sources]

    @dg.asset(
        key=CATALOG_KEY,
        deps=[asset_key_for(i) for i in source_ids] + [reconcile_key(i) for i in source_ids],
        pool="catalog",
        group_name="catalog",
        kinds={"duckdb", "parquet"},
        description=(
            "Every source's live records in one place: the DuckDB view `catalog`, the table `source_stats` "
            "and one Parquet export per source.\n\n"
            "(Re)creates the view `catalog` (live records, normalized fields) and the table `source_stats` "
            "(live, deleted, quarantined, last change per source), and writes `data/exports/<source>.parquet` "
            "(temp file, then rename).\n\n"
            "- **Overview → Metadata**: per source live, deleted, quarantined and its export; "
            "`latest_records`, the newest records of each source.\n"
            f"- **Automation → {CATALOG_SENSOR}**: refreshes it whenever the catalogue changes.\n"
            "- Shell: `harvest-pipeline show SOURCE IDENTIFIER` for one record and its history; "
            "`duckdb data/harvest.duckdb` for SQL."
        ),
    )
    def catalog(context: dg.AssetExecutionContext, duckdb: DuckDBResource):
        directory = exports_dir(catalogue_path(duckdb))
        with catalogue_connector(duckdb)() as con:
            with transaction(con):
                stats = refresh_catalog(con, source_ids)
                fingerprint = catalog_fingerprint(con)
            exports = export_parquet(con, directory, [s["source_id"] for s in stats])
            latest = latest_records(con, source_ids, per_source=LATEST_PER_SOURCE)
        metadata: dict = {}
        for s in stats:
            path, rows = exports[s["source_id"]]
            metadata[s["source_id"]] = dg.MetadataValue.json({
                "live": s["live"],
                "deleted": s["deleted"],
                "quarantined": s["quarantined"],
                "last_change": s["last_change"].isoformat() + "Z" if s["last_change"] else None,
                "export": str(path),
                "export_rows": rows,
            })
        context.log.info(f"catalog: {sum(s['live'] for s in stats)} live records, exports in {directory}")
        return dg.MaterializeResult(
            metadata={
                **metadata,
                "live_total": sum(s["live"] for s in stats),
                "sources": len(stats),
                "exports": dg.MetadataValue.path(str(directory)),
                "fingerprint": fingerprint,
                "latest_records": dg.MetadataValue.table(
                    records=[dg.TableRecord(r) for r in latest], schema=LATEST_SCHEMA,
                ),
            }
        )

    return catalog


def build_catalog_job():
    return dg.define_asset_job(
        CATALOG_JOB,
        selection=dg.AssetSelection.assets(CATALOG_KEY),
        description="Refresh the catalog view, source_stats and the Parquet exports.",
    )


def build_catalog_sensor(job) -> dg.SensorDefinition:
    @dg.sensor(
        name=CATALOG_SENSOR,
        job=job,
        minimum_interval_seconds=60,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Requests a catalog refresh (view, source_stats, Parquet exports) whenever the catalogue has changed.",
    )
    def catalog_refresh(context: dg.SensorEvaluationContext):
        state = _catalog_cursor(context.cursor)
        busy = context.instance.get_runs(
            filters=dg.RunsFilter(job_name=BATCH_JOB, statuses=IN_FLIGHT), limit=1)
        if busy:
            # A refresh takes the catalogue's lock for a while and a run process of its own: while
            # windows are being harvested it waits, at most REFRESH_WHILE_HARVESTING_SECONDS from
            # the tick that first found them (a fresh deployment's first catch-up included).
            waiting_since = state.get("waiting_since") or time.time()
            if time.time() - waiting_since < REFRESH_WHILE_HARVESTING_SECONDS:
                return dg.SensorResult(
                    skip_reason="windows are being harvested; the catalog view refreshes when they are done",
                    cursor=json.dumps({**state, "waiting_since": waiting_since}))
        def skip(reason: str):
            if "waiting_since" not in state:
                return dg.SkipReason(reason)
            # Not waiting any more: the next harvest's wait starts afresh.
            return dg.SensorResult(skip_reason=reason, cursor=json.dumps(
                {k: v for k, v in state.items() if k != "waiting_since"}))

        try:
            with connect(read_only=True, wait_seconds=10) as con:
                fingerprint = catalog_fingerprint(con)
        except HarvestError as exc:  # locked by a writer, or not created yet
            return skip(f"will try next tick: {exc}")
        except duckdb_module.Error as exc:
            return skip(f"catalogue not ready: {exc}")
        if fingerprint == state.get("fingerprint"):
            return skip("the catalogue has not changed since the last refresh")
        return dg.SensorResult(
            run_requests=[dg.RunRequest(run_key=f"catalog:{fingerprint}")],
            cursor=json.dumps({"fingerprint": fingerprint, "at": time.time()}),
        )

    return catalog_refresh


def _catalog_cursor(cursor: str | None) -> dict:
    """{fingerprint of the last refresh, when it was requested, since when a refresh waits for
    harvests}; a bare fingerprint from before is read as {fingerprint}."""
    if not cursor:
        return {}
    try:
        state = json.loads(cursor)
    except ValueError:
        return {"fingerprint": cursor}
    return state if isinstance(state, dict) else {"fingerprint": cursor}
