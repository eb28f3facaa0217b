"""`harvest-pipeline dev` and `demo-server`: the local demo provider, with or without the UI."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys

from harvest_pipeline.cli.facts import refresh_for_dev
from harvest_pipeline.home import ensure_dagster_home


def register(sub) -> None:
    d = sub.add_parser("dev", help="start the demo provider and the Dagster UI")
    d.add_argument("--demo-port", type=int, default=8765)
    d.add_argument("--ui-host", default="127.0.0.1")
    d.add_argument("--ui-port", type=int, default=3000)
    d.set_defaults(func=cmd_dev)

    ds = sub.add_parser("demo-server", help="serve the demo OAI-PMH provider (flags: python -m harvest_pipeline.demo --help)")
    ds.add_argument("demo_args", nargs=argparse.REMAINDER)
    ds.set_defaults(func=cmd_demo_server)


def cmd_demo_server(args: argparse.Namespace) -> int:
    from harvest_pipeline.demo.__main__ import main as demo_main

    return demo_main(args.demo_args) or 0


def cmd_dev(args: argparse.Namespace) -> int:
    """Start the demo provider, then `dagster dev` on this project, and stop both together."""
    home = ensure_dagster_home()
    demo = subprocess.Popen(
        [sys.executable, "-m", "harvest_pipeline.demo", "--port", str(args.demo_port)],
        stdout=subprocess.PIPE, text=True,
    )
    line = demo.stdout.readline().strip()
    if demo.poll() is not None or "listening" not in line:
        print(f"the demo provider did not start (port {args.demo_port} busy?): {line}", file=sys.stderr)
        return 1
    print(line, flush=True)
    env = {
        **os.environ,
        "HARVEST_DEMO_URL": f"http://127.0.0.1:{args.demo_port}/oai",
        "HARVEST_DEMO_CSW_URL": f"http://127.0.0.1:{args.demo_port}/csw",
    }
    refresh_for_dev(env, args.ui_host, args.ui_port)  # before Dagster loads: partitions from the start
    print(f"Dagster UI on http://127.0.0.1:{args.ui_port}  (DAGSTER_HOME={home})", flush=True)
    ui = subprocess.Popen(
        [sys.executable, "-m", "dagster", "dev", "-w", "workspace.yaml", "-h", args.ui_host, "-p", str(args.ui_port)],
        env=env,
    )
    # SIGTERM (e.g. from a service manager) stops both children as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        return ui.wait()
    except KeyboardInterrupt:
        ui.send_signal(signal.SIGINT)
        try:
            return ui.wait(timeout=30)
        except subprocess.TimeoutExpired:
            ui.kill()
            return 1
    finally:
        demo.terminate()
        demo.wait(timeout=10)


