"""`harvest-pipeline remap SOURCE… | --all`: map the stored records again from their raw XML (job remap_records)."""

from __future__ import annotations

import argparse
import sys

from harvest_pipeline.cli.common import cli_instance, failure_cause, progress_line
from harvest_pipeline.home import ensure_dagster_home


def register(sub) -> None:
    r = sub.add_parser(
        "remap",
        help="map a source's stored records again from their raw XML after a mapper changed (no request to the server)",
    )
    r.add_argument("sources", nargs="*", metavar="SOURCE", help="the sources to remap, one run each")
    r.add_argument("--all", action="store_true", help="every source in the sources file, one after another")
    r.add_argument("--dry-run", action="store_true", help="only report what would change; write nothing")
    r.set_defaults(func=cmd_remap)


def cmd_remap(args: argparse.Namespace) -> int:
    ensure_dagster_home()
    from harvest_pipeline.defs.factory import build_definitions
    from harvest_pipeline.sources import load_sources

    sources = {s.id: s for s in load_sources()}
    if bool(args.sources) == args.all:
        print("name the sources to remap, or give --all", file=sys.stderr)
        return 2
    unknown = [s for s in args.sources if s not in sources]
    if unknown:
        print(f"unknown source(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(sources)) or '(none)'}",
              file=sys.stderr)
        return 2
    chosen = list(sources) if args.all else list(dict.fromkeys(args.sources))
    defs = build_definitions([sources[s] for s in chosen])
    failed = 0
    for source_id in chosen:
        failed += _remap_one(defs, source_id, args.dry_run)
    if len(chosen) > 1:
        done = "examined (dry run)" if args.dry_run else "remapped"
        print(f"{len(chosen) - failed} of {len(chosen)} source(s) {done}" + (f", {failed} FAILED" if failed else ""))
    return 1 if failed else 0


def _remap_one(defs, source_id: str, dry_run: bool) -> int:
    """Run `remap_records` for one source and print what it did; 1 if the run failed."""
    from harvest_pipeline.cli.harvest import QUIET
    from harvest_pipeline.defs.jobs import REMAP_JOB, REMAP_OP, remap_run_config
    from harvest_pipeline.defs.sensors import SOURCE_TAG

    with progress_line(lambda e: f"  {source_id}: {e['examined']} records examined, {e['changed']} map differently"):
        result = defs.resolve_job_def(REMAP_JOB).execute_in_process(
            instance=cli_instance(), raise_on_error=False, tags={SOURCE_TAG: source_id},
            run_config={**remap_run_config(source_id, dry_run), **QUIET},
        )
    if not result.success:
        print(f"{source_id}: remap FAILED: {failure_cause(result)}  (run {result.run_id})")
        return 1
    out = result.output_for_node(REMAP_OP)
    verb = "would be rewritten" if out["dry_run"] else "rewritten"
    print(f"{source_id}: {out['examined']} live records mapped again from their stored XML in {out['seconds']} s; "
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
