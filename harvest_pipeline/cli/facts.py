"""`harvest-pipeline facts [SOURCE ...]`: ask the servers about themselves and store the answers.

The definitions read these stored facts at load (they never ask the servers themselves), so this is
how a new source gets its partitions without the UI having to wait on its server.
"""

from __future__ import annotations

import argparse
import os
import sys

WEBSERVER_ENV = "HARVEST_DAGSTER_WEBSERVER"  # defs/facts.py reads it; here without importing Dagster


def register(sub) -> None:
    f = sub.add_parser("facts", help="refresh the stored server facts (Identify / GetCapabilities) of sources")
    f.add_argument("sources", nargs="*", metavar="SOURCE", help="source ids (default: every source)")
    f.add_argument("--show", action="store_true", help="print what is stored, ask no server")
    f.set_defaults(func=cmd_facts)


def cmd_facts(args: argparse.Namespace) -> int:
    from harvest_pipeline.sources import load_sources

    sources = load_sources()
    known = {s.id: s for s in sources}
    unknown = [s for s in args.sources if s not in known]
    if unknown:
        print(f"unknown source(s) {', '.join(unknown)}; known: {', '.join(sorted(known)) or '(none)'}", file=sys.stderr)
        return 2
    chosen = [known[i] for i in args.sources] if args.sources else sources
    if args.show:
        return show_facts(chosen)
    failed = refresh_all(chosen, learned_by="harvest-pipeline facts")
    return 1 if failed else 0


def show_facts(sources) -> int:
    from harvest_pipeline.harvest.server_facts import read_facts
    from harvest_pipeline.store import default_db_path

    db_path = default_db_path()
    for source in sources:
        facts = read_facts(source, db_path)
        if facts is None:
            print(f"{source.id}: not known yet (run `harvest-pipeline facts {source.id}`)")
        else:
            print(_line(source.id, facts))
    return 0


def refresh_all(sources, *, learned_by: str, out=print) -> list[str]:
    """Refresh each source's facts; print one line each; return the ids whose server did not answer."""
    from harvest_pipeline.harvest.server_facts import refresh_facts
    from harvest_pipeline.store import default_db_path

    db_path = default_db_path()
    failed = []
    for source in sources:
        try:
            facts, changed = refresh_facts(source, db_path, learned_by=learned_by)
        except Exception as exc:  # noqa: BLE001 - report and go on with the next source
            failed.append(source.id)
            out(f"{source.id}: NOT refreshed: {exc}")
            continue
        out(_line(source.id, facts) + ("" if changed else " (unchanged)"))
    return failed


def refresh_for_dev(env: dict, ui_host: str, ui_port: int) -> None:
    """`harvest-pipeline dev`: store the shipped sources' facts before Dagster loads, so the UI shows
    every partition at once, and tell the refresh job where the webserver is (for reloads)."""
    from harvest_pipeline.sources import load_sources

    saved = dict(os.environ)
    os.environ.update(env)  # the sources file reads HARVEST_DEMO_URL and friends
    try:
        refresh_all(load_sources(), learned_by="harvest-pipeline dev", out=lambda line: print(f"server facts: {line}", flush=True))
    finally:
        os.environ.clear()
        os.environ.update(saved)
    env[WEBSERVER_ENV] = f"{ui_host}:{ui_port}"


def _line(source_id: str, facts) -> str:
    cap = f", page cap {facts.page_cap}" if facts.page_cap else ""
    return (
        f"{source_id}: granularity {facts.granularity}, earliest {facts.earliest_datestamp or '?'}, "
        f"deletedRecord {facts.deleted_record or '?'}{cap}; partitions start {facts.partitions_start or 'unknown'} "
        f"(learned {facts.learned_at} by {facts.learned_by})"
    )
