"""The Dagster code location: `dg dev -w workspace.yaml` (or `harvest-pipeline dev`) loads `defs` from here."""

import warnings

import dagster as dg

from harvest_pipeline.defs.factory import build_definitions

# Dagster 1.13 copies every sensor it resolves against its jobs with `owners=[]`, and warns that the
# (unused) parameter is beta, once per sensor and process: noise in every log, nothing to act on.
warnings.filterwarnings("ignore", message="Parameter `owners` of initializer `SensorDefinition", category=dg.BetaWarning)

defs = build_definitions()
