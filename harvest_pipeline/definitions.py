"""The Dagster code location: `dagster dev -w workspace.yaml` loads `defs` from here."""

from harvest_pipeline.defs.factory import build_definitions

defs = build_definitions()
