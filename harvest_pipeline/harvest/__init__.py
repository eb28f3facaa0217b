"""Harvesting one window of one source, end to end, without Dagster.

`harvest_window` runs the token loop into the window's staging file, merges it into the
catalogue and returns the verdict the asset checks report. `harvest_partition` calls it and
splits a window that cannot finish whole into sub-windows (harvest/split.py); Dagster (defs/)
and the CLI call `harvest_partition`.
"""

from harvest_pipeline.harvest.split import harvest_partition
from harvest_pipeline.harvest.window import Window, WindowReport, harvest_window

__all__ = ["Window", "WindowReport", "harvest_partition", "harvest_window"]
