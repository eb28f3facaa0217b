"""`harvest-pipeline remap SOURCE`: map the stored records again from their raw XML (job remap_records)."""

from __future__ import annotations

import argparse
import sys

from harvest_pipeline.cli.common import cli_instance, failure_cause
from harvest_pipeline.home import ensure_dagster_home


def register(sub) -> None:
    r = sub.add_parser(
        "remap",
        help="map a source's stored records again from their raw XML after a mapper changed (no request to the server)",
    )
    r.add_argument("source")
    r.add_argument("--dry-run", action="store_true", help="only report what would change; write nothing")
    r.set_defaults(func=cmd_remap)


def cmd_remap(args: argparse.Namespace) -> int:
    ensure_dagster_home()
    from harvest_pipeline.cli.harvest import QUIET
    from harvest_pipeline.defs.factory import build_definitions
    from harvest_pipeline.defs.jobs import REMAP_JOB, REMAP_OP, remap_run_config
    from harvest_pipeline.defs.sensors import SOURCE_TAG
    from harvest_pipeline.harvest.progress import subscribe
    from harvest_pipeline.sources import load_sources

    sources = {s.id: s for s in load_sources()}
    if args.source not in sources:
        print(f"unknown source {args.source!r}; known: {', '.join(sorted(sources)) or '(none)'}", file=sys.stderr)
        return 2
    defs = build_definitions([sources[args.source]])
    interactive = sys.stdout.isatty()

    def show(event: dict) -> None:
        if interactive:
            line = f"  {event['examined']} records examined, {event['changed']} map differently"
            print("\r" + line.ljust(78), end="", flush=True)

    unsubscribe = subscribe(show)
    try:
        result = defs.resolve_job_def(REMAP_JOB).execute_in_process(
            instance=cli_instance(), raise_on_error=False, tags={SOURCE_TAG: args.source},
            run_config={**remap_run_config(args.source, args.dry_run), **QUIET},
        )
    finally:
        unsubscribe()
    if interactive:
        print("\r" + " " * 78 + "\r", end="")
    if not result.success:
        print(f"{args.source}: remap FAILED: {failure_cause(result)}  (run {result.run_id})")
        return 1
    out = result.output_for_node(REMAP_OP)
    verb = "would be rewritten" if out["dry_run"] else "rewritten"
    print(f"{args.source}: {out['examined']} live records mapped again from their stored XML in {out['seconds']} s; "
          f"{out['changed']} map differently now, {out['written'] if not out['dry_run'] else out['changed']} {verb}"
          + (f", {out['stale']} left as a newer harvest wrote them" if out["stale"] else "")
          + f"  (run {result.run_id})")
    if out["changed"]:
        print(f"  formats:  {', '.join(f'{k}: {v}' for k, v in out['formats'].items())}")
        print(f"  columns:  {', '.join(f'{k}: {v}' for k, v in out['columns'].items())}")
        if out["now_mapped"] or out["now_unmapped"]:
            print(f"  {out['now_mapped']} record(s) no mapper read before are mapped now; "
                  f"{out['now_unmapped']} that mapped before are not (see `records.mapping_error`)")
        print(f"  e.g.      {', '.join(out['examples'][:5])}")
    return 0
