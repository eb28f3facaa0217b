"""DAGSTER_HOME under data/ so run history, sensor cursors and schedules survive restarts.

`dagster dev` without DAGSTER_HOME uses a temporary home and deletes it on exit; every entry
point of ours (the CLI, `harvest-pipeline dev`) calls `ensure_dagster_home()` first.
"""

from __future__ import annotations

import fcntl
import os
import shutil
from pathlib import Path

DEFAULT_HOME = "data/dagster_home"


def ensure_dagster_home(project_dir: Path | None = None) -> Path:
    project_dir = Path(project_dir or Path.cwd())
    home = Path(os.environ.get("DAGSTER_HOME") or project_dir / DEFAULT_HOME).resolve()
    home.mkdir(parents=True, exist_ok=True)
    # The project's dagster.yaml is the source of truth; keep the home's copy in step with it.
    template = project_dir / "dagster.yaml"
    target = home / "dagster.yaml"
    if template.exists() and template.resolve() != target.resolve():
        if not target.exists() or target.read_bytes() != template.read_bytes():
            shutil.copyfile(template, target)
    elif not target.exists():
        # Run outside the project folder: a minimal instance config, so Dagster stays quiet.
        target.write_text("telemetry:\n  enabled: false\n")
    os.environ["DAGSTER_HOME"] = str(home)
    _create_instance_storage_once(home)
    return home


def _create_instance_storage_once(home: Path) -> None:
    """Create the instance's databases in one process at a time.

    Dagster creates its SQLite storages on first use, and processes doing that together can
    stamp `alembic_version` twice (dagster-io/dagster#27390), after which every run fails with
    "more than one head". The first of our processes creates them under a file lock; the stamp
    file lets later starts skip the lock and the instance load.
    """
    import dagster

    stamp = home / ".storage-created"
    if stamp.exists() and stamp.read_text().strip() == dagster.__version__:
        return
    with open(home / ".storage.lock", "a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if stamp.exists() and stamp.read_text().strip() == dagster.__version__:
            return
        with dagster.DagsterInstance.get():
            pass
        stamp.write_text(dagster.__version__ + "\n")
