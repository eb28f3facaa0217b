"""`harvest-pipeline`: harvest, status, probe, and the local demo (`dev`, `demo-server`).

One module per command; each has `register(subparsers)`. Add a command by adding its module
name to COMMANDS.
"""

from __future__ import annotations

import argparse
import os
import sys
from importlib import import_module

from harvest_pipeline.errors import ConfigError, HarvestError

COMMANDS = ("harvest", "remap", "status", "probe", "dev", "show", "sources", "facts")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harvest-pipeline", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        import_module(f"harvest_pipeline.cli.{name}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(argv)
    except BrokenPipeError:
        # The reader left early (`status | head`): stop quietly, the way Python's docs describe
        # (signal module, "Note on SIGPIPE"): point stdout at devnull so the interpreter's final
        # flush cannot fail again, and exit 1.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1


def _run(argv: list[str] | None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
        sys.stdout.flush()  # a reader that left shows up here at the latest, inside main's handler
        return code
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except HarvestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
