"""`harvest-pipeline sources list|add|remove|check`: the sources file, edited with its comments kept."""

from __future__ import annotations

import argparse
import json
import sys

from harvest_pipeline.cli.common import json_default

REMOVED_RECORDS_NOTE = (
    "Its harvested records stay in the catalogue (records, record_history, harvest_windows), in the "
    "catalog view and in its Parquet export; adding it back with the same id continues from its "
    "watermark. To drop them, see README 'Source registry'."
)


def register(sub) -> None:
    s = sub.add_parser("sources", help="list, add, remove or check the sources in the sources file")
    ss = s.add_subparsers(dest="sources_command", required=True)

    ls = ss.add_parser("list", help="the configured sources")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_list)

    add = ss.add_parser("add", help="probe a server, propose its settings and add it to the sources file")
    add.add_argument("id", help="lowercase letters, digits and _ (becomes the asset key harvest/<id>)")
    add.add_argument("url", help="the OAI-PMH base URL or the CSW endpoint")
    add.add_argument("--protocol", choices=("oai-pmh", "csw"), help="default: csw when the URL ends in /csw, else oai-pmh")
    add.add_argument("--prefix", dest="metadata_prefix", help="OAI-PMH metadataPrefix (default: oai_dc when offered)")
    add.add_argument("--set", dest="set_spec", help="OAI-PMH setSpec to harvest")
    add.add_argument("--window", choices=("hour", "day", "week", "month"), help="default: day")
    add.add_argument("--timeout", type=float, default=30)
    add.add_argument("--dry-run", action="store_true", help="print the proposed entry, write nothing")
    add.set_defaults(func=cmd_add)

    rm = ss.add_parser("remove", help="remove a source from the sources file (its records stay)")
    rm.add_argument("id")
    rm.set_defaults(func=cmd_remove)

    ck = ss.add_parser("check", help="validate the file and ask every source's server about itself (no harvest)")
    ck.add_argument("--timeout", type=float, default=10)
    ck.set_defaults(func=cmd_check)


def cmd_list(args: argparse.Namespace) -> int:
    from harvest_pipeline.sources import load_sources, sources_file_path

    sources = load_sources()
    if args.json:
        out = [s.model_dump(mode="json", exclude_defaults=True) | {"id": s.id} for s in sources]
        print(json.dumps(out, default=json_default, indent=2))
        return 0
    print(f"{sources_file_path()}: {len(sources)} source(s)")
    for s in sources:
        what = f"csw {s.csw.output_schema}" if s.csw else f"{s.metadata_prefix}{' set ' + s.set if s.set else ''}"
        start = s.start.strftime("%Y-%m-%d") if s.start else "earliest"
        print(f"  {s.id:<20} {s.protocol:<8} {s.window:<6} {what:<40} from {start:<10}  {s.url}")
    return 0


def cmd_add(args: argparse.Namespace) -> int:
    from harvest_pipeline.sources import sources_file_path
    from harvest_pipeline.sources.edit import add_source, source_ids
    from harvest_pipeline.sources.probe import guess_protocol, probe_server, propose_entry

    path = sources_file_path()
    if path.exists() and args.id in source_ids(path):
        print(f"{path}: source '{args.id}' exists already (remove it first, or pick another id)", file=sys.stderr)
        return 2
    protocol = args.protocol or guess_protocol(args.url)
    facts = probe_server(args.url, protocol, timeout=args.timeout, list_sets=bool(args.set_spec))
    entry, why = propose_entry(
        facts, source_id=args.id, metadata_prefix=args.metadata_prefix, set_spec=args.set_spec, window=args.window,
    )
    print(f"{args.url}: {facts.name or '(no name)'} ({protocol})")
    for note in facts.notes:
        print(f"  ! {note}")
    print("Proposed entry:")
    for key, value in entry.items():
        for name, v in (value.items() if isinstance(value, dict) else [(None, value)]):
            print(f"  {key}.{name}: {v}" if name else f"  {key}: {value}")
    for reason in why:
        print(f"  - {reason}")
    if args.dry_run:
        print("(dry run: nothing written)")
        return 0
    add_source(entry, note=facts.name, path=path)
    from harvest_pipeline.harvest.server_facts import learn_new_source
    from harvest_pipeline.store import default_db_path

    if learn_new_source(args.id, default_db_path(), learned_by="harvest-pipeline sources add") is None:
        print(f"{args.id}: server facts not stored yet; the sensor harvest_watermarks (or `harvest-pipeline facts {args.id}`) learns them")
    print(f"Added to {path}. Reload the code location in the UI (Deployment -> Reload) to see harvest/{args.id}.")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    from harvest_pipeline.sources import sources_file_path
    from harvest_pipeline.sources.edit import remove_source

    remove_source(args.id)
    print(f"Removed '{args.id}' from {sources_file_path()}. {REMOVED_RECORDS_NOTE}")
    print("Reload the code location in the UI (Deployment -> Reload): its assets and schedule go away.")
    return 0


def cmd_check(args: argparse.Namespace) -> int:
    from harvest_pipeline.sources import load_sources, sources_file_path
    from harvest_pipeline.sources.probe import check_source

    sources = load_sources()  # a bad file exits 2 with the source and the field named
    print(f"{sources_file_path()}: valid, {len(sources)} source(s)")
    failed = 0
    for s in sources:
        ok, said = check_source(s, timeout=args.timeout)
        failed += not ok
        print(f"  {s.id:<20} {'ok' if ok else 'FAILED':<6} {said}")
    return 1 if failed else 0
