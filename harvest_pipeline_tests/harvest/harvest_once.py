"""Harvest one daily window in this process (the crash and concurrency tests run it as a child).

usage: python harvest_once.py URL DB_PATH WINDOW_START_ISO
Crash points come from the HARVEST_CRASHPOINT env var (harvest_pipeline/crashpoints.py).
"""

import sys
from datetime import datetime, timedelta

from harvest_pipeline.harvest import Window, harvest_window
from harvest_pipeline.sources.registry import SourceConfig

url, db_path, start_iso = sys.argv[1:4]
start = datetime.fromisoformat(start_iso)
report = harvest_window(
    SourceConfig(id="demo", url=url), Window(start, start + timedelta(days=1), start.strftime("%Y-%m-%d")), db_path=db_path
)
print(report.status, report.counts.received, report.run_id)
