"""The Dagster code location: `dg dev -w workspace.yaml` (or `harvest-pipeline dev`) loads `defs` from here."""

from harvest_pipeline.defs.factory import build_definitions

defs = build_definitions()
