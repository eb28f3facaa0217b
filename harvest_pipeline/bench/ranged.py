"""Prototype (bench only): a RANGED window asset that keeps per-window check results visible.

The project's asset runs one window per Dagster run (~1 s or more of run machinery each). A UI
backfill can instead launch one run per *range* of partitions if the asset has a
``BackfillPolicy`` (``multi_run(max_partitions_per_run=N)`` or ``single_run()``). The catch
(dagster-facts.md): a ranged run stores its ``AssetCheckResult``s with ``partition=None``, and the
default IO manager refuses ranged outputs.

What this prototype does instead, checked on dagster 1.13.27:

* ``@asset(..., backfill_policy=multi_run(N), output_required=False)``: no output at all, so no IO
  manager and no automatic range-wide materialization;
* for every window of ``context.partition_keys``: run ``harvest_window`` (which writes the ledger
  row with the window's verdict, as today), then ``context.log_event(AssetMaterialization(partition=k,
  metadata=<that window's numbers>))`` and one ``context.log_event(AssetCheckEvaluation(...,
  partition=k))`` per check. Dagster stores those per partition: ``get_asset_check_partition_info``
  and ``get_asset_check_execution_history`` show each window's own verdict, and each partition has
  exactly one materialization with its own metadata;
* the declared check outputs still have to be yielded once per run: one summary
  ``AssetCheckResult`` per check (passed = every window passed), stored with ``partition=None``
  (one extra row per check per run, not per window);
* a window that raises is recorded (ledger ``failed``, as today), the other windows of the range
  still run, and the run fails at the end naming the failed windows.

Nothing here changes the project's definitions: it builds its own asset from the same pieces.
(No ``from __future__ import annotations`` here: Dagster reads the asset's annotations at runtime.)
"""

import warnings
from datetime import datetime

import dagster as dg
from dagster._core.storage.tags import (
    ASSET_PARTITION_RANGE_END_TAG,
    ASSET_PARTITION_RANGE_START_TAG,
)
from dagster_duckdb import DuckDBResource

from harvest_pipeline.defs.assets import asset_key_for, pool_for
from harvest_pipeline.defs.checks import CHECK_DESCRIPTIONS
from harvest_pipeline.defs.partitions import partitions_for
from harvest_pipeline.defs.resources import (
    catalogue_connector,
    catalogue_path,
    catalogue_resource,
)
from harvest_pipeline.harvest import Window, harvest_window
from harvest_pipeline.sources import SourceConfig

RANGE_TAGS = (ASSET_PARTITION_RANGE_START_TAG, ASSET_PARTITION_RANGE_END_TAG)


def _severity(verdict) -> dg.AssetCheckSeverity:
    return dg.AssetCheckSeverity.WARN if verdict.severity == "warn" else dg.AssetCheckSeverity.ERROR


def build_ranged_asset(source: SourceConfig, start: datetime, max_partitions_per_run: int) -> dg.AssetsDefinition:
    key = asset_key_for(source.id)
    partitions_def = partitions_for(source, start)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        specs = [dg.AssetCheckSpec(name, asset=key, description=text, partitions_def=partitions_def)
                 for name, text in CHECK_DESCRIPTIONS.items()]
        policy = dg.BackfillPolicy.multi_run(max_partitions_per_run=max_partitions_per_run)

    @dg.asset(key=key, partitions_def=partitions_def, check_specs=specs, pool=pool_for(source.id),
              backfill_policy=policy, output_required=False, group_name="harvest")
    def ranged_window_asset(context: dg.AssetExecutionContext, duckdb: DuckDBResource):
        failed: list[str] = []
        check_failures: dict[str, list[str]] = {name: [] for name in CHECK_DESCRIPTIONS}
        for k in context.partition_keys:
            tw = partitions_def.time_window_for_partition_key(k)
            try:
                report = harvest_window(source, Window(tw.start, tw.end, k), run_id=context.run_id,
                                        db_path=catalogue_path(duckdb), connect=catalogue_connector(duckdb))
            except Exception as exc:  # noqa: BLE001 - the ledger has it; finish the range, fail at the end
                failed.append(f"{k}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}")
                context.log.error(f"{source.id} {k}: {exc}")
                continue
            counts = report.counts
            context.log_event(dg.AssetMaterialization(asset_key=key, partition=k, metadata={
                "status": report.status, "records": counts.received, "upserts": counts.upserted,
                "deletions": counts.deleted, "pages": report.pages, "seconds": round(report.seconds, 3),
                **({"completeListSize": report.complete_list_size} if report.complete_list_size is not None else {}),
            }))
            for name, verdict in report.checks.items():
                if name not in check_failures:
                    continue
                if not verdict.passed and verdict.severity != "warn":
                    check_failures[name].append(k)
                context.log_event(dg.AssetCheckEvaluation(
                    asset_key=key, check_name=name, passed=verdict.passed, severity=_severity(verdict),
                    description=verdict.description, partition=k,
                    metadata={mk: mv for mk, mv in verdict.metadata.items() if mv is not None},
                ))
        for name, bad in check_failures.items():
            yield dg.AssetCheckResult(
                check_name=name, passed=not bad and not failed,
                description=(f"range of {len(context.partition_keys)} windows: "
                             + (f"failed in {', '.join(bad[:10])}" if bad else "every window passed")),
                metadata={"windows": len(context.partition_keys), "failed_windows": len(bad) + len(failed)},
            )
        if failed:
            raise dg.Failure(f"{len(failed)} window(s) failed: " + "; ".join(failed[:5]))

    return ranged_window_asset


def build_ranged_definitions(source: SourceConfig, start: datetime, max_partitions_per_run: int) -> dg.Definitions:
    asset = build_ranged_asset(source, start, max_partitions_per_run)
    return dg.Definitions(
        assets=[asset],
        jobs=[dg.define_asset_job(f"harvest_{source.id}_ranged", selection=[asset.key])],
        resources={"duckdb": catalogue_resource()},
        executor=dg.in_process_executor,
    )


def ranges(keys: list[str], size: int) -> list[tuple[str, str]]:
    """What multi_run(max_partitions_per_run=size) launches: consecutive chunks of the keys."""
    return [(keys[i], keys[min(i + size, len(keys)) - 1]) for i in range(0, len(keys), size)]


def per_partition_check_status(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, dict[str, str]]:
    """{check name: {partition: latest status}} as Dagster stores it (None = range summary)."""
    out: dict[str, dict[str, str]] = {}
    for name in CHECK_DESCRIPTIONS:
        ck = dg.AssetCheckKey(key, name)
        infos = instance.event_log_storage.get_asset_check_partition_info([ck])
        out[name] = {str(i.partition_key): getattr(i.latest_execution_status, "value", str(i.latest_execution_status))
                     for i in infos}
    return out
