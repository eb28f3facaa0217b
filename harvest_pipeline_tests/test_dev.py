"""`harvest-pipeline dev` stops everything it started, whatever signal asks it to.

A real `dev` on free ports: the demo provider, `dg dev`, the webserver, the daemon, the code
server and its gRPC child. The test waits until the code server's gRPC child is up, signals `dev`
alone (not its group), and then checks that no process of the tree survives.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _processes() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (ppid, pgid, state, command line) of every process on the machine."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (OSError, IndexError):
            continue
        out[int(stat.parent.name)] = (int(fields[1]), int(fields[2]), fields[0], cmdline)
    return out


def _descendants(root: int) -> dict[int, str]:
    procs = _processes()
    found, frontier = {}, [root]
    while frontier:
        parent = frontier.pop()
        for pid, (ppid, _, _, cmd) in procs.items():
            if ppid == parent and pid not in found:
                found[pid] = cmd
                frontier.append(pid)
    return found


def _alive(pid: int, cmd: str) -> bool:
    """Still running as the same program (a zombie or a recycled pid does not count)."""
    info = _processes().get(pid)
    return info is not None and info[2] != "Z" and info[3] == cmd


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT to a background job"])
def test_dev_stops_its_whole_process_tree(tmp_path, how):
    start = (datetime.now(timezone.utc) - timedelta(days=2)).strftime("%Y-%m-%d")
    sources = tmp_path / "sources.yaml"
    sources.write_text(
        "sources:\n  - id: demo\n    url: ${HARVEST_DEMO_URL}\n    window: day\n" f"    start: {start}\n"
    )
    shutil.copy(PROJECT / "workspace.yaml", tmp_path / "workspace.yaml")
    env = {
        **os.environ,
        "HARVEST_SOURCES_FILE": str(sources),
        "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb"),
        "DAGSTER_HOME": str(tmp_path / "dagster_home"),
    }
    ignore_sigint = how.startswith("SIGINT")
    # A job started with `&` by a non-interactive shell begins with SIGINT ignored.
    preexec = (lambda: signal.signal(signal.SIGINT, signal.SIG_IGN)) if ignore_sigint else None
    demo_port = _free_port()
    dev = subprocess.Popen(
        [sys.executable, "-m", "harvest_pipeline.cli", "dev", "--demo-port", str(demo_port), "--ui-port", str(_free_port())],
        cwd=tmp_path, env=env, stdin=subprocess.DEVNULL, stdout=open(tmp_path / "dev.out", "wb"),
        stderr=open(tmp_path / "dev.log", "wb"), preexec_fn=preexec,
    )
    tree: dict[int, str] = {}
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert dev.poll() is None, (tmp_path / "dev.log").read_text()[-3000:]
            tree.update(_descendants(dev.pid))
            if any("api grpc" in c for c in tree.values()) and any("dagster_webserver" in c for c in tree.values()):
                break
            time.sleep(1)
        else:
            pytest.fail("the code server's gRPC child did not start:\n" + (tmp_path / "dev.log").read_text()[-3000:])
        tree.update(_descendants(dev.pid))
        commands = " | ".join(tree.values())
        for part in ("harvest_pipeline.demo", "code-server", "api grpc", "dagster_webserver", "dagster._daemon"):
            assert part in commands
        # The children run in a process group of their own, not in the caller's.
        procs = _processes()
        assert os.getpgid(0) not in {procs[pid][1] for pid in tree if pid in procs}

        dev.send_signal(signal.SIGINT if ignore_sigint else signal.SIGTERM)
        dev.wait(timeout=90)
        deadline = time.monotonic() + 5  # orphans would be reparented, not gone
        survivors = tree
        while survivors and time.monotonic() < deadline:
            survivors = {pid: cmd for pid, cmd in tree.items() if _alive(pid, cmd)}
            time.sleep(0.2)
        assert survivors == {}, survivors
        # Another port than the sources file's default: `dev` says how the CLI elsewhere reaches it.
        assert f"export HARVEST_DEMO_URL=http://127.0.0.1:{demo_port}/oai" in (tmp_path / "dev.out").read_text()
    finally:
        if dev.poll() is None:
            dev.kill()
        for pid, cmd in tree.items():
            if _alive(pid, cmd):
                os.kill(pid, signal.SIGKILL)
