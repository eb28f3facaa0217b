"""Harvesting windows of one source, end to end, without Dagster.

`harvest_window` runs the token loop into the window's staging folder, merges it into the
catalogue and returns the verdict the asset checks report. `harvest_partition` calls it and
splits a window that cannot finish whole into sub-windows (harvest/split.py). `harvest_windows`
harvests consecutive windows of one source, each as `harvest_partition` would, with window N's
merge overlapping window N+1's traversal (harvest/sequence.py); Dagster (defs/) and the CLI call
`harvest_partition` for one window and `harvest_windows` for a range.
"""

import importlib

# Imported on first use: loading the Dagster definitions must not pay for the whole harvest core
# (lxml, pyarrow, requests) in every code-server start and sensor process.
_EXPORTS = {
    "Window": "harvest_pipeline.harvest.window",
    "WindowReport": "harvest_pipeline.harvest.window",
    "harvest_window": "harvest_pipeline.harvest.window",
    "harvest_partition": "harvest_pipeline.harvest.split",
    "WindowOutcome": "harvest_pipeline.harvest.sequence",
    "harvest_windows": "harvest_pipeline.harvest.sequence",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
