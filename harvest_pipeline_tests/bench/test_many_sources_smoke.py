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
    # Where the wall time went: each part measured and the parts in order within the wall.
    b = level["breakdown"]
    assert b["requests_per_source_max"] >= level["pages_per_source_max"]
    for key in ("dagster_start_s", "launch_s", "to_first_request_median_s", "servers_busy_s", "after_last_response_s"):
        assert b[key] is not None and b[key] >= 0, (key, b)
    assert b["to_first_request_median_s"] <= b["to_first_request_max_s"]
    assert b["dagster_start_s"] + b["launch_s"] + b["servers_busy_s"] < level["wall_s"] + 1
    assert 0 < b["source_span_median_s"] <= b["source_span_max_s"] <= b["servers_busy_s"] + 0.01
    assert 0 < b["source_busy_share_median"] <= 1.05
    assert "where the wall time went" in proc.stdout
    names = [t["name"] for t in section["targets"]]
    assert any("shipped settings: >= 80% of server-bound" in n for n in names)
    assert any("machine peak memory <= 8 GB" in n for n in names)


def test_the_wall_breakdown_splits_a_catch_up_into_its_parts():
    from harvest_pipeline.bench.many_section import wall_breakdown

    # dagster dev at 100; runs created at 105 and 106, started at 107 and 108, ended at 130 and 131;
    # three servers asked first at 108.5, 109, 110 and last at 126, 127, 128, with 2 s per response.
    runs = [(105.0, 107.0, 130.0), (106.0, 108.0, 131.0)]
    served = [{"requests": 7, "first_request_at": 108.5, "last_request_at": 126.0},
              {"requests": 8, "first_request_at": 109.0, "last_request_at": 127.0},
              {"requests": 7, "first_request_at": 110.0, "last_request_at": 128.0}]
    b = wall_breakdown(100.0, runs, served, 2.0)
    assert b["dagster_start_s"] == 5.0 and b["launch_s"] == 2.0
    assert b["to_first_request_median_s"] == 2.0 and b["to_first_request_max_s"] == 3.0
    assert b["servers_busy_s"] == 130.0 - 108.5 and b["after_last_response_s"] == 1.0
    assert b["requests_per_source_max"] == 8
    # Each source's own span, first request .. last response (19.5, 20, 20 s), and the share of it
    # its server spent answering (14/19.5, 16/20, 14/20).
    assert b["source_span_median_s"] == 20.0 and b["source_span_max_s"] == 20.0
    assert b["source_busy_share_median"] == pytest.approx(14 / 19.5)
    # A server that saw nothing and a run not started yet leave those parts unknown, not wrong.
    b = wall_breakdown(100.0, [(105.0, None, None)], [{"requests": 0, "first_request_at": None,
                                                        "last_request_at": None}], 2.0)
    assert b["launch_s"] is None and b["servers_busy_s"] is None and b["after_last_response_s"] is None
    assert b["source_span_median_s"] is None and b["source_busy_share_median"] is None


def test_the_target_line_gives_both_ratios_to_two_decimals():
    from harvest_pipeline.bench.many_section import _targets

    # A catch-up ratio of 0.754 printed with one decimal read "0.8": the target's own value.
    level = {"setting": "shipped", "max_concurrent_runs": 4, "rate": 1279.5, "server_bound_rate": 2142.9,
             "ratio": 0.597, "wall_s": 23.4, "one_source_server_s": 14.0, "runs_span_s": 18.6, "runs_ratio": 0.754,
             "windows_verified": 300, "windows_expected": 300, "machine_peak_mb": 1070.0,
             "harvester_tree_peak_mb": 1234.0}
    ratio_line = _targets({"sources": 100, "levels": [level]})[0]
    assert ratio_line["verdict"] == "MISS"
    assert "= 0.60 (" in ratio_line["numbers"] and "catch-up alone 18.6 s = 0.75)" in ratio_line["numbers"]


def test_the_provider_farm_numbers_loopback_addresses_past_254():
    from harvest_pipeline.bench.provider_farm import MAX_HOSTS, loopback_host

    assert [loopback_host(n) for n in (1, 2, 254, 255, 508, 509)] == [
        "127.0.0.1", "127.0.0.2", "127.0.0.254", "127.0.1.1", "127.0.1.254", "127.0.2.1"]
    # Every address is distinct and inside 127.0.0.0/8, never a block's .0 or .255.
    hosts = [loopback_host(n) for n in range(1, 2_000)]
    assert len(set(hosts)) == len(hosts) and all(h.split(".")[3] not in ("0", "255") for h in hosts)
    with pytest.raises(ValueError):
        loopback_host(MAX_HOSTS + 1)
