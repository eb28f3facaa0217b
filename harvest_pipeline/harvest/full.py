"""Full harvest: the whole source in one listing without from/until, staged, merged and verified.

It is `harvest_window(..., full=True)` over the pseudo-window [1970-01-01, now), named
`full-<UTC time>`. All full harvests of a source share that window's start, so they share one
ledger row in `harvest_windows` (its `attempts` counts them) and one staging folder: a full harvest
that was killed resumes from its last page when it is run again. The watermark rule never looks at
that row (no partition starts in 1970).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from harvest_pipeline.harvest.window import WindowReport, harvest_window, one_off_window
from harvest_pipeline.sources import SourceConfig

FULL_START = datetime(1970, 1, 1, tzinfo=timezone.utc)




def harvest_full(source: SourceConfig, *, db_path: str | Path, **kw) -> WindowReport:
    """List, stage, merge and verify the whole of `source` (keyword arguments as harvest_window)."""
    return harvest_window(source, one_off_window("full", start=FULL_START), db_path=db_path, full=True, **kw)
