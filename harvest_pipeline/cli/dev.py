"""`harvest-pipeline dev` and `demo-server`: the local demo provider, with or without the UI."""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from harvest_pipeline.cli.facts import refresh_for_dev
from harvest_pipeline.home import ensure_dagster_home
from harvest_pipeline.sources.registry import sources_file_path
from harvest_pipeline.store.connection import default_db_path

# Signals that stop `dev`. SIGINT is in the list on purpose: a job started with `&` from a
# non-interactive shell inherits SIGINT as ignored, and only an explicit handler undoes that.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
GRACE_SECONDS = 20.0  # Dagster's own shutdown (webserver, daemon, code server) before SIGTERM
TERM_SECONDS = 5.0  # after SIGTERM, before SIGKILL
DEFAULT_DEMO_PORT = 8765  # the port data/sources.yaml falls back to


def register(sub) -> None:
    d = sub.add_parser("dev", help="start the demo provider and the Dagster UI")
    d.add_argument("--demo-port", type=int, default=DEFAULT_DEMO_PORT)
    d.add_argument("--ui-host", default="127.0.0.1")
    d.add_argument("--ui-port", type=int, default=3000)
    d.set_defaults(func=cmd_dev)

    ds = sub.add_parser("demo-server", help="serve the demo OAI-PMH provider (flags: python -m harvest_pipeline.demo --help)")
    ds.add_argument("demo_args", nargs=argparse.REMAINDER)
    ds.set_defaults(func=cmd_demo_server)


def cmd_demo_server(args: argparse.Namespace) -> int:
    from harvest_pipeline.demo.__main__ import main as demo_main

    return demo_main(args.demo_args) or 0


class _Stop(Exception):
    """Raised by the signal handler to leave whatever `dev` is waiting on."""


def _raise_stop(signum, _frame) -> None:
    raise _Stop(signal.Signals(signum).name)


def dg_command() -> list[str]:
    """`dg` from the same environment as this Python (dagster-dg-cli is a dependency)."""
    beside = Path(sys.executable).parent / "dg"
    return [str(beside if beside.exists() else shutil.which("dg") or "dg")]


def cmd_dev(args: argparse.Namespace) -> int:
    """Start the demo provider, then the Dagster UI on this project, and stop both together.

    Both children and everything they start (code server, its gRPC child, run workers,
    multiprocessing's resource tracker) share one process group of their own, so a stop
    reaches them all, whatever signal asked for it.
    """
    for sig in STOP_SIGNALS:
        signal.signal(sig, _raise_stop)
    home = ensure_dagster_home()
    group: int | None = None
    try:
        demo = subprocess.Popen(
            [sys.executable, "-m", "harvest_pipeline.demo", "--port", str(args.demo_port)],
            stdout=subprocess.PIPE, text=True, process_group=0,
        )
        group = demo.pid
        line = demo.stdout.readline().strip()
        if demo.poll() is not None or "listening" not in line:
            print(f"the demo provider did not start (port {args.demo_port} busy?): {line}", file=sys.stderr)
            return 1
        print(line, flush=True)
        env = {
            **os.environ,
            # The UI runs from DAGSTER_HOME's folder (below): the project's files by absolute path.
            "HARVEST_SOURCES_FILE": str(sources_file_path().resolve()),
            "HARVEST_DUCKDB_PATH": str(default_db_path().resolve()),
            "HARVEST_DEMO_URL": f"http://127.0.0.1:{args.demo_port}/oai",
            "HARVEST_DEMO_CSW_URL": f"http://127.0.0.1:{args.demo_port}/csw",
        }
        refresh_for_dev(env, args.ui_host, args.ui_port)  # before Dagster loads: partitions from the start
        print(f"Dagster UI on http://127.0.0.1:{args.ui_port}  (DAGSTER_HOME={home})", flush=True)
        if args.demo_port != DEFAULT_DEMO_PORT:
            # The sources file's default is the default port: the CLI in another shell (`status`,
            # `harvest demo`) needs the URLs this process gives its children.
            print("the CLI in another shell reaches this demo provider after: export "
                  f"HARVEST_DEMO_URL={env['HARVEST_DEMO_URL']} HARVEST_DEMO_CSW_URL={env['HARVEST_DEMO_CSW_URL']}",
                  flush=True)
        # `dg dev` with the workspace file that pins the code location's name, started in
        # DAGSTER_HOME: Dagster then reads the instance config there and does not warn that the
        # project's dagster.yaml (the copy's source) is not DAGSTER_HOME's.
        ui = subprocess.Popen(
            dg_command() + ["dev", "-w", str(Path("workspace.yaml").resolve()), "-h", args.ui_host, "-p", str(args.ui_port)],
            env=env, process_group=group, cwd=home,
        )
        code = ui.wait()
        print(f"the Dagster UI exited with code {code}; stopping the demo provider", file=sys.stderr)
        return code
    except _Stop as stop:
        print(f"{stop}: stopping the Dagster UI and the demo provider", file=sys.stderr, flush=True)
        return 0
    finally:
        for sig in STOP_SIGNALS:  # a second Ctrl-C must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        if group is not None:
            stop_group(group)


def stop_group(group: int) -> None:
    """SIGINT to the whole group (what Ctrl-C in a terminal does), then SIGTERM, then SIGKILL."""
    for sig, wait in ((signal.SIGINT, GRACE_SECONDS), (signal.SIGTERM, TERM_SECONDS), (signal.SIGKILL, TERM_SECONDS)):
        if not group_alive(group):
            return
        try:
            os.killpg(group, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while group_alive(group) and time.monotonic() < deadline:
            time.sleep(0.2)


def group_alive(group: int) -> bool:
    """Whether a process of the group is still running (zombies, once reaped or not, do not count)."""
    _reap_children()
    proc = Path("/proc")
    if not proc.is_dir():
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return False
        return True
    for stat in proc.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        # fields after "(comm)": state, ppid, pgrp, ...
        if fields[0] != "Z" and int(fields[2]) == group:
            return True
    return False


def _reap_children() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
