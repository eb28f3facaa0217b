"""`harvest-pipeline`: harvest, status, probe, and the local demo (`dev`, `demo-server`).

One module per command; each has `register(subparsers)`. Add a command by adding its module
name to COMMANDS.
"""

from __future__ import annotations

import argparse
import sys
from importlib import import_module

from harvest_pipeline.errors import ConfigError, HarvestError

COMMANDS = ("harvest", "status", "probe", "dev", "show", "facts")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="harvest-pipeline", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        import_module(f"harvest_pipeline.cli.{name}").register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except ConfigError as exc:
        print(f"config error: {exc}", file=sys.stderr)
        return 2
    except HarvestError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
