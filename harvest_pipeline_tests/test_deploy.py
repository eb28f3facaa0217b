""".deploy/: the instance config is valid Dagster config and the image's command resolves."""

from __future__ import annotations

import importlib
import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / ".deploy"


def test_the_instance_config_validates_against_dagsters_schema(monkeypatch):
    from dagster._core.instance.config import dagster_instance_config  # validates against the schema

    for var in ("DAGSTER_PG_HOST", "DAGSTER_PG_PORT", "DAGSTER_PG_DB", "DAGSTER_PG_USER", "DAGSTER_PG_PASSWORD"):
        monkeypatch.setenv(var, "x")
    config, _ = dagster_instance_config(str(DEPLOY))
    assert config["storage"]["postgres"]["postgres_db"]["hostname"] == {"env": "DAGSTER_PG_HOST"}
    launcher = config["run_launcher"]
    launcher_class = getattr(importlib.import_module(launcher["module"]), launcher["class"])
    # The launcher's own config schema accepts the block (what Dagster does when it builds it).
    from dagster._config import process_config

    result = process_config(launcher_class.config_type(), launcher["config"])
    assert result.success, result.errors
    # Every variable a worker needs is passed into the run containers.
    example = (DEPLOY / "worker.env.example").read_text()
    example_vars = set(re.findall(r"^#?\s*([A-Z_]+)=", example, re.M))
    assert example_vars <= set(launcher["config"]["env_vars"]), example_vars - set(launcher["config"]["env_vars"])


def test_the_workspace_loads_the_code_server_of_the_image():
    workspace = yaml.safe_load((DEPLOY / "workspace.yaml").read_text())
    grpc = workspace["load_from"][0]["grpc_server"]
    assert grpc["port"] == 4000 and grpc["location_name"] == "harvest_pipeline"


def test_the_images_command_resolves():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    cmd = json.loads(re.search(r"^CMD (\[.*\])$", dockerfile, re.M).group(1))
    assert cmd[:3] == ["dagster", "code-server", "start"]
    module = cmd[cmd.index("-m") + 1]
    assert importlib.util.find_spec(module) is not None
    assert cmd[cmd.index("--location-name") + 1] == "harvest_pipeline"
    # The same command line parses with the installed dagster (--help stops before serving).
    dagster = Path(sys.executable).parent / "dagster"
    done = subprocess.run([str(dagster), *cmd[1:3], "--help"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--location-name" in done.stdout, done.stderr
    # What the image installs is what the project declares.
    assert "pip install --no-cache-dir '.[deploy]'" in dockerfile
    assert "COPY .deploy/dagster.yaml /app/dagster_home/dagster.yaml" in dockerfile
