"""Smoke test of the --many-sources bench section: a few sources through a real `dagster dev`.

Speed is not asserted (that is the benchmark's job): only that the section brings every window
of every source to `verified` in the ledger and reports its figures.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_many_sources_section_verifies_every_window_and_reports_its_figures(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.bench", "--quick", "--no-contenders", "--many-sources", "2",
         "--many-days", "2", "--many-delay-ms", "100", "--many-timeout", "240", "--many-port", str(_free_port()),
         "--json", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=400, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== 2 latency-bound sources at once through `dagster dev`" in proc.stdout, proc.stdout[-3000:]
    section = json.loads(out.read_text())["sections"]["many"]
    assert "error" not in section, section
    (level,) = section["levels"]
    assert level["setting"] == "shipped" and not level["timed_out"]
    assert level["windows_expected"] == 4 and level["windows_verified"] == 4, level["ledger_statuses"]
    assert level["records"] > 0 and level["pages_per_source_max"] >= 2
    assert level["one_source_server_s"] == pytest.approx(level["pages_per_source_max"] * 0.1)
    for key in ("wall_s", "runs_span_s", "rate", "server_bound_rate", "ratio", "machine_peak_mb",
                "harvester_tree_peak_mb", "farm_peak_mb"):
        assert level[key] is not None and level[key] > 0, key
    assert level["run_processes_peak"] >= 1 and level["run_process_peak_mb"] > 0
    names = [t["name"] for t in section["targets"]]
    assert any("shipped settings: >= 80% of server-bound" in n for n in names)
    assert any("machine peak memory <= 8 GB" in n for n in names)
