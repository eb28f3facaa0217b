"""`harvest-pipeline probe URL`: what a server says about itself."""

from __future__ import annotations

import argparse

from harvest_pipeline.errors import HarvestError


def register(sub) -> None:
    pr = sub.add_parser(
        "probe", help="what a server says about itself, its quirk profile and the source settings to use",
    )
    pr.add_argument("url")
    pr.add_argument("--timeout", type=float, default=30)
    pr.add_argument("--max-sets", type=int, default=50)
    pr.add_argument("--protocol", choices=("oai-pmh", "csw"), help="default: csw when the URL ends in /csw, else oai-pmh")
    pr.add_argument("--prefix", help="the metadataPrefix to profile (default: oai_dc when offered)")
    pr.add_argument("--id", dest="source_id", default="new_source", help="the source id in the proposed settings")
    pr.add_argument("--no-profile", action="store_true",
                    help="only Identify, ListMetadataFormats and ListSets (3 requests), no quirk profile")
    pr.set_defaults(func=cmd_probe)


def cmd_probe(args: argparse.Namespace) -> int:
    protocol = args.protocol or ("csw" if args.url.rstrip("/").lower().endswith("csw") else "oai-pmh")
    if protocol == "csw":
        return _probe_csw(args)
    if args.no_profile:
        return _describe_only(args)
    from harvest_pipeline.harvest.probe_profile import profile_endpoint

    prof = profile_endpoint(args.url, timeout=args.timeout, metadata_prefix=args.prefix)
    _print_identify(prof.identify, prof.formats)
    print("ListSets (first page)")
    if prof.sets is None:
        print("  (no sets)")
    else:
        for s in prof.sets[: args.max_sets]:
            print(f"  {s.spec:24} {s.name}")
        if len(prof.sets) > args.max_sets or prof.sets_more:
            print(f"  ... (more than {min(len(prof.sets), args.max_sets)})")
    print(f"Quirk profile ({prof.requests} requests, metadataPrefix {prof.metadata_prefix})")
    latency = (f"median {prof.latency_median * 1000:.0f} ms, slowest {prof.latency_max * 1000:.0f} ms"
               if prof.latencies else "(none measured)")
    rows = [
        ("until/from", prof.dates),
        ("continuations", prof.continuation),
        ("set with dates", prof.set_with_dates),
        ("gzip", prof.gzip),
        ("Content-Length", prof.content_length),
        ("deletedRecord", f"{prof.identify.deleted_record} ({prof.deleted_on_first_page} deleted on the first page)"),
        ("page size", prof.page_size if prof.page_size is not None else "(unknown)"),
        ("completeListSize", prof.list_size if prof.list_size is not None else "(not given)"),
        ("latency", latency),
    ]
    for name, value in rows:
        print(f"  {name:20} {value}")
    for note in prof.notes:
        print(f"  ! {note}")
    print("Proposed source settings")
    for line in prof.yaml_snippet(args.source_id).splitlines():
        print(f"  {line}")
    return 0


def _print_identify(info, formats) -> None:
    print("Identify")
    for field in ("repository_name", "base_url", "protocol_version", "earliest_datestamp", "deleted_record", "granularity"):
        print(f"  {field:20} {getattr(info, field)}")
    if info.admin_emails:
        print(f"  {'admin_emails':20} {', '.join(info.admin_emails)}")
    from harvest_pipeline.formats import format_for_namespace

    print("ListMetadataFormats (and the mapper that reads each)")
    for fmt in formats:
        mapper = format_for_namespace(fmt.namespace)
        print(f"  {fmt.prefix:14} {fmt.namespace}  " + (f"-> {mapper}" if mapper else "-> no mapper: stored raw"))


def _describe_only(args: argparse.Namespace) -> int:
    from harvest_pipeline.oai.client import OAIClient

    client = OAIClient(args.url, timeout=args.timeout)
    _print_identify(client.identify(), client.list_metadata_formats())
    print("ListSets")
    try:
        for n, s in enumerate(client.list_sets()):
            if n >= args.max_sets:
                print(f"  ... (more than {args.max_sets})")
                break
            print(f"  {s.spec:24} {s.name}")
    except HarvestError as exc:
        print(f"  ({exc})")
    return 0


def _probe_csw(args: argparse.Namespace) -> int:
    from harvest_pipeline.csw.client import CSWClient

    caps = CSWClient(args.url, timeout=args.timeout).get_capabilities()
    print("GetCapabilities")
    print(f"  {'title':22} {caps.title}")
    print(f"  {'version':22} {caps.version}")
    print(f"  {'operations':22} {', '.join(sorted(caps.operations))}")
    print(f"  {'output schemas':22} {', '.join(caps.output_schemas) or '(not advertised)'}")
    print(f"  {'type names':22} {', '.join(caps.type_names) or '(not advertised)'}")
    print(f"  {'constraint languages':22} {', '.join(caps.constraint_languages) or '(not advertised)'}")
    print(f"  {'page-size cap':22} {caps.max_records if caps.max_records is not None else '(not advertised)'}")
    for w in caps.warnings:
        print(f"  ! {w}")
    return 0
