"""How many sources a process harvests at once, from its open-file limit.

Each case runs in a child process: a hard limit, once lowered, cannot be raised again.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

resource = pytest.importorskip("resource")


def _in_child(soft: int, hard: int, code: str) -> dict:
    script = (
        "import json, resource\n"
        f"resource.setrlimit(resource.RLIMIT_NOFILE, ({soft}, {hard}))\n"
        "from harvest_pipeline import open_files\n"
        f"{code}\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_a_low_soft_limit_is_raised_to_what_the_sources_need_when_the_hard_limit_allows():
    out = _in_child(256, 4096, (
        "at_once, limit = open_files.sources_at_once(100)\n"
        "print(json.dumps({'at_once': at_once, 'limit': limit,"
        " 'soft': resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))"))
    assert out == {"at_once": 100, "limit": 664, "soft": 664}  # 64 + 6 x 100


def test_a_hard_limit_too_low_for_every_source_caps_how_many_run_at_once():
    out = _in_child(80, 100, (
        "at_once, limit = open_files.sources_at_once(24)\n"
        "print(json.dumps({'at_once': at_once, 'limit': limit, 'hint': open_files.limit_hint(),"
        " 'soft': resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))"))
    assert out["limit"] == out["soft"] == 100  # raised as far as the hard limit lets it
    assert out["at_once"] == (100 - 64) // 6 == 6
    assert "ulimit -n" in out["hint"] and "(now 100)" in out["hint"] and "HARVEST_SOURCES_PER_RUN" in out["hint"]


def test_a_limit_that_suffices_is_left_as_it_is_and_never_lowered():
    out = _in_child(5000, 5000, (
        "at_once, limit = open_files.sources_at_once(3)\n"
        "print(json.dumps({'at_once': at_once, 'limit': limit,"
        " 'soft': resource.getrlimit(resource.RLIMIT_NOFILE)[0]}))"))
    assert out == {"at_once": 3, "limit": 5000, "soft": 5000}
    # Even a process with hardly any room harvests one source at a time, not none.
    assert _in_child(40, 40, "print(json.dumps(open_files.sources_at_once(10)))") == [1, 40]
