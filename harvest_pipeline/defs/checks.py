"""The per-window asset checks: names, descriptions and how a verdict becomes a check result."""

from __future__ import annotations

import warnings

import dagster as dg

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
