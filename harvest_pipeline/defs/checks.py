"""The per-window asset checks: names, descriptions and how a verdict becomes a check result."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import dagster as dg

if TYPE_CHECKING:  # the harvest core is imported when a run needs it, not when definitions load
    from harvest_pipeline.harvest.window import CheckVerdict

CHECK_DESCRIPTIONS = {
    "complete": (
        "Records received and stored for the window equal the server's completeListSize. A list "
        "without completeListSize over several pages cannot be proven complete: WARN, not a pass."
    ),
    "no_duplicates": "No identifier was listed twice within the window's traversal.",
    "cursor_closed": "The resumption-token loop ended with an empty or absent token; no cursor left open.",
}


def check_specs(asset_key: dg.AssetKey, partitions_def: dg.PartitionsDefinition) -> list[dg.AssetCheckSpec]:
    # Partitioned checks are a preview feature, but they are what shows a verdict per window in the UI.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return [
            dg.AssetCheckSpec(name, asset=asset_key, description=text, partitions_def=partitions_def)
            for name, text in CHECK_DESCRIPTIONS.items()
        ]


def check_result(name: str, verdict: CheckVerdict) -> dg.AssetCheckResult:
    return dg.AssetCheckResult(
        check_name=name,
        passed=verdict.passed,
        severity=dg.AssetCheckSeverity.WARN if verdict.severity == "warn" else dg.AssetCheckSeverity.ERROR,
        description=verdict.description,
        metadata={k: v for k, v in verdict.metadata.items() if v is not None},
    )


def materialization_target(record):
    """What an evaluation must point at for the UI to count it as the check of that materialization.

    Dagster fills this in itself for a run of one partition; a ranged run logs per-window
    evaluations, whose target has to be given. Dagster 1.13 has no public name for the type
    (only `AssetCheckEvaluation.target_materialization_data` is public): without it the
    evaluations are still stored per partition, but the check's Partitions tab shows them as
    missing, so the import is kept here, alone, and optional.
    """
    try:
        from dagster._core.definitions.asset_checks.asset_check_evaluation import (
            AssetCheckEvaluationTargetMaterializationData,
        )
    except ImportError:  # moved in a later Dagster: evaluations stay unlinked, nothing breaks
        return None
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=record.storage_id, run_id=record.run_id, timestamp=record.timestamp,
    )


def check_evaluation(asset_key: dg.AssetKey, name: str, verdict: CheckVerdict, partition_key: str,
                     target=None) -> dg.AssetCheckEvaluation:
    """One window's verdict inside a ranged run, stored by Dagster under that window's partition."""
    return dg.AssetCheckEvaluation(
        target_materialization_data=target,
        asset_key=asset_key,
        check_name=name,
        passed=verdict.passed,
        severity=dg.AssetCheckSeverity.WARN if verdict.severity == "warn" else dg.AssetCheckSeverity.ERROR,
        description=verdict.description,
        metadata={k: v for k, v in verdict.metadata.items() if v is not None},
        partition=partition_key,
    )


def range_summary(name: str, keys: list[str], failing: list[str], failed_windows: dict[str, str]) -> dg.AssetCheckResult:
    """The run-level result Dagster expects once per declared check (stored without a partition)."""
    passed = not failing and not failed_windows
    if failing:
        text = f"failed in {len(failing)} window(s): {', '.join(failing[:10])}"
    elif failed_windows:
        text = f"not evaluated for {len(failed_windows)} window(s) whose harvest failed: {', '.join(list(failed_windows)[:10])}"
    else:
        text = "passed in every window"
    return dg.AssetCheckResult(
        check_name=name,
        passed=passed,
        description=f"run of {len(keys)} windows {keys[0]}...{keys[-1]}: {text}. Each window's own result is under its partition.",
        # No numbers here: the check's plots are the windows' own results, not run summaries.
    )
