"""DAGSTER_HOME under data/ so run history, sensor cursors and schedules survive restarts.

`dagster dev` without DAGSTER_HOME uses a temporary home and deletes it on exit; every entry
point of ours (the CLI, `harvest-pipeline dev`) calls `ensure_dagster_home()` first.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

DEFAULT_HOME = "data/dagster_home"


def ensure_dagster_home(project_dir: Path | None = None) -> Path:
    project_dir = Path(project_dir or Path.cwd())
    home = Path(os.environ.get("DAGSTER_HOME") or project_dir / DEFAULT_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    # The project's instance config lives in the default home itself (a dagster.yaml in the
    # project root would make Dagster warn that it is ignored); other homes get a copy of it.
    template = project_dir / DEFAULT_HOME / "dagster.yaml"
    target = home / "dagster.yaml"
    if template.exists() and template.resolve() != target.resolve():
        if not target.exists() or target.read_bytes() != template.read_bytes():
            shutil.copyfile(template, target)
    elif not target.exists():
        # Run outside the project folder: a minimal instance config, so Dagster stays quiet.
        target.write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home)
    return home
