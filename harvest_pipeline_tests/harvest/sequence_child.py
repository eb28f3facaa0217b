"""Harvest N consecutive daily windows with harvest_windows in this process (a crash test's child).

usage: python sequence_child.py URL DB_PATH FIRST_WINDOW_START_ISO N
Crash points come from the HARVEST_CRASHPOINT env var (harvest_pipeline/crashpoints.py).
"""

import sys
from datetime import datetime, timedelta

from harvest_pipeline.harvest import Window, harvest_windows
from harvest_pipeline.sources.registry import SourceConfig

url, db_path, start_iso, n = sys.argv[1:5]
first = datetime.fromisoformat(start_iso)
windows = [
    Window(first + timedelta(days=i), first + timedelta(days=i + 1), (first + timedelta(days=i)).strftime("%Y-%m-%d"))
    for i in range(int(n))
]
for outcome in harvest_windows(SourceConfig(id="demo", url=url), windows, db_path=db_path):
    print(outcome.window.key, outcome.report.status if outcome.ok else f"error: {outcome.error}", flush=True)
