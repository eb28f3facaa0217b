"""The --shared benchmark section runs end to end (tiny sizes: a smoke run, not a measurement)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.shared


def test_the_shared_section_measures_every_kind(tmp_path):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, "-m", "harvest_pipeline.bench", "--no-contenders", "--shared", "--quick",
         "--shared-levels", "1,2", "--shared-rows", "50", "--json", str(out)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "== Shared catalogue" in proc.stdout
    results = json.loads(out.read_text())["sections"]["shared"]["results"]
    assert {(r["kind"], r["writers"]) for r in results} == {
        (k, w) for k in ("embedded", "postgres", "ducklake") for w in (1, 2)}
    for r in results:
        if r["kind"] == "ducklake" and r["writers"] > 1:
            continue  # DuckLake may lose its conflicts for good: reported, not required
        assert "error" not in r, r
        assert r["rows"] == r["writers"] * 2 * 50 and r["records_per_s"] > 0
