"""`harvest-pipeline probe URL`: what a server says about itself."""

from __future__ import annotations

import argparse

from harvest_pipeline.errors import HarvestError


def register(sub) -> None:
    pr = sub.add_parser("probe", help="what a server says in Identify, ListMetadataFormats and ListSets")
    pr.add_argument("url")
    pr.add_argument("--timeout", type=float, default=30)
    pr.add_argument("--max-sets", type=int, default=50)
    pr.add_argument("--protocol", choices=("oai-pmh", "csw"), help="default: csw when the URL ends in /csw, else oai-pmh")
    pr.set_defaults(func=cmd_probe)


def cmd_probe(args: argparse.Namespace) -> int:
    protocol = args.protocol or ("csw" if args.url.rstrip("/").lower().endswith("csw") else "oai-pmh")
    if protocol == "csw":
        return _probe_csw(args)
    from harvest_pipeline.oai.client import OAIClient

    client = OAIClient(args.url, timeout=args.timeout)
    info = client.identify()
    print("Identify")
    for field in ("repository_name", "base_url", "protocol_version", "earliest_datestamp", "deleted_record", "granularity"):
        print(f"  {field:20} {getattr(info, field)}")
    if info.admin_emails:
        print(f"  {'admin_emails':20} {', '.join(info.admin_emails)}")
    print("ListMetadataFormats")
    for fmt in client.list_metadata_formats():
        print(f"  {fmt.prefix:14} {fmt.namespace}")
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
