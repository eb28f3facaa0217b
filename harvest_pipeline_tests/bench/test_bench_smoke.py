"""Smoke test of the benchmark script: it runs end to end and prints its tables. No timings asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]


def _bench(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.bench", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False,
    )


def _rows(stdout: str, header_start: str) -> list[str]:
    """The data rows of the table whose header line starts with `header_start`."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:  # header, rule, rows...
        if not line.strip() or line.startswith(("==", "Dagster", "  ", "peak", "harvest_window")):
            break
        rows.append(line)
    return rows


def test_quick_run_prints_the_contender_table_and_the_targets(tmp_path):
    out = tmp_path / "bench.json"
    proc = _bench("--quick", "--only", "fetch-only,client,harvest", "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc.stdout, "contender")
    assert [r.split()[0] for r in rows] == ["fetch-only", "client", "harvest"]
    for row in rows:
        assert "ERROR" not in row, row
    assert rows[0].rstrip().endswith("1.00")  # the baseline's ratio to itself
    targets = _rows(proc.stdout, "target")
    assert any(t.startswith("full harvest >= 60% of fetch-only") and ("PASS" in t or "MISS" in t) for t in targets)
    assert any(t.startswith("our client >= 2x Sickle") and "n/a" in t for t in targets)  # sickle not run
    assert out.exists() and '"contenders"' in out.read_text()


def test_unknown_contender_is_a_usage_error():
    proc = _bench("--quick", "--only", "nope")
    assert proc.returncode == 2
    assert "unknown contender" in proc.stderr


def test_upsert_section_runs_both_its_parts(tmp_path):
    """Throughput (N into M) and the small window's cost into a big source with its history."""
    proc = _bench("--no-contenders", "--upsert", "--upsert-rows", "200", "--upsert-existing", "1000",
                  "--upsert-window", "20", "--upsert-window-existing", "2000", "--runs", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r.split()[0] for r in _rows(proc.stdout, "scenario")][:3] == ["created", "updated", "unchanged"]
    cases = _rows(proc.stdout, "merged into")[:4]  # then its notes
    assert [" ".join(r.split()[:3]) for r in cases] == [
        "empty catalogue 20", "new records into", "new records into", "new versions into"]
    assert "The big source's first merge" in proc.stdout


def test_rss_section_reports_each_runs_peak_and_its_catalogue_file(tmp_path):
    """A first harvest and the same window again, each with its peak RSS and the file it left."""
    out = tmp_path / "bench.json"
    proc = _bench("--no-contenders", "--rss", "--rss-sizes", "500", "--rss-runs", "1", "--rss-what-if", "none",
                  "--json", str(out))
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = _rows(proc.stdout, "window")
    assert [r.split()[1] for r in rows] == ["as-is", "again"]
    sizes = json.loads(out.read_text())["sections"]["rss"]["sizes"]["500"]
    for label in ("as-is", "again"):
        assert sizes[label]["peak_mb"] > 0, label
        assert sizes[label]["catalogue_mb"] > 0, label  # the DuckDB file the run wrote
