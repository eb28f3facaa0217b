"""Harvesting windows of one source, end to end, without Dagster.

`harvest_window` runs the token loop into the window's staging file, merges it into the
catalogue and returns the verdict the asset checks report. `harvest_partition` calls it and
splits a window that cannot finish whole into sub-windows (harvest/split.py). `harvest_windows`
harvests consecutive windows of one source, each as `harvest_partition` would, with window N's
merge overlapping window N+1's traversal (harvest/sequence.py); Dagster (defs/) and the CLI call
`harvest_partition` for one window and `harvest_windows` for a range.
"""

from harvest_pipeline.harvest.split import harvest_partition
from harvest_pipeline.harvest.window import Window, WindowReport, harvest_window
from harvest_pipeline.harvest.sequence import WindowOutcome, harvest_windows

__all__ = ["Window", "WindowOutcome", "WindowReport", "harvest_partition", "harvest_window", "harvest_windows"]
