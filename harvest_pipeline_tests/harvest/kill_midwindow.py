"""Harvest one window and SIGKILL this very process after N committed pages (used by the crash tests).

usage: python kill_midwindow.py URL DB_PATH WINDOW_START_ISO KILL_AFTER_PAGES
Pages are committed one by one unless HARVEST_STAGING_COMMIT_ROWS is set by the caller.
"""

import os
import signal
import sys
from datetime import datetime, timedelta

from harvest_pipeline.harvest import Window, harvest_window
from harvest_pipeline.sources.registry import SourceConfig


def main() -> None:
    os.environ.setdefault("HARVEST_STAGING_COMMIT_ROWS", "1")
    url, db_path, start_iso, kill_after = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    start = datetime.fromisoformat(start_iso)
    window = Window(start, start + timedelta(days=1), start.strftime("%Y-%m-%d"))

    def progress(event: dict) -> None:
        if event["pages"] >= kill_after:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no finally blocks: a real crash

    harvest_window(SourceConfig(id="demo", url=url), window, db_path=db_path, progress=progress)


if __name__ == "__main__":
    main()
