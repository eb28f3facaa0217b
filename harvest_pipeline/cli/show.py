"""`harvest-pipeline show SOURCE IDENTIFIER`: a record's current state and its full history."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime, timedelta

from harvest_pipeline.cli.common import json_default


def register(sub) -> None:
    s = sub.add_parser("show", help="a record's current state and its history, oldest first")
    s.add_argument("source")
    s.add_argument("identifier")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_show)


def origin(row: dict) -> tuple[str, str]:
    """(kind, label) of what wrote a history row or a record: window, full, selected, remap or reconcile."""
    from harvest_pipeline.harvest.full import FULL_START
    from harvest_pipeline.harvest.remap import REMAP_MARKER
    from harvest_pipeline.harvest.selected import SELECTED_MARKER
    from harvest_pipeline.store.reconcile import RECONCILE_MARKER

    attempt = row.get("attempt_id") or ""
    start, end = row.get("window_start"), row.get("window_end")
    if attempt.startswith(RECONCILE_MARKER):
        return "reconcile", "reconciliation"
    if attempt.startswith(SELECTED_MARKER):
        return "selected", row.get("window_name") or f"selected-{_ts(start)}"
    if attempt.startswith(REMAP_MARKER):
        return "remap", row.get("window_name") or f"remap-{_ts(start)}"
    if start is not None and start == FULL_START.replace(tzinfo=None):
        return "full", row.get("window_name") or f"full-{_ts(end)}"
    if row.get("window_name"):
        return "window", row["window_name"]
    if start is None:
        return "unknown", "-"
    if end is not None and end - start == timedelta(days=1) and start.time() == datetime.min.time():
        return "window", start.strftime("%Y-%m-%d")
    return "window", f"{_ts(start)}..{_ts(end)}"


def _ts(value) -> str:
    return value.strftime("%Y-%m-%dT%H:%M:%SZ") if isinstance(value, datetime) else "-"


def _text(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return "; ".join(str(v) for v in value) or "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def cmd_show(args: argparse.Namespace) -> int:
    from harvest_pipeline.store import connect, default_db_path
    from harvest_pipeline.store.connection import catalogue_exists
    from harvest_pipeline.store.columns import DESCRIPTIVE_COLUMNS
    from harvest_pipeline.store.history import record_history, record_state

    db_path = default_db_path()
    if not catalogue_exists(db_path):
        print(f"no catalogue at {db_path} yet (HARVEST_DUCKDB_PATH)", file=sys.stderr)
        return 1
    with connect(db_path, read_only=True, wait_seconds=30) as con:
        record = record_state(con, args.source, args.identifier)
        history = record_history(con, args.source, args.identifier)
    if record is None and not history:
        print(f"{args.source} {args.identifier}: not in the catalogue", file=sys.stderr)
        return 1
    if record is not None:
        last = next((h for h in reversed(history) if h["run_id"] == record["written_by_run"]), None)
        kind, label = origin({**record, "attempt_id": last["attempt_id"] if last else None})
        record["written_by"] = {"kind": kind, "label": label, "run_id": record["written_by_run"], "at": record["written_at"]}
    for h in history:
        h["origin"], h["window"] = origin(h)

    if args.json:
        out = {"source_id": args.source, "identifier": args.identifier, "record": record, "history": history}
        print(json.dumps(out, default=json_default, indent=2))
        return 0

    print(f"{args.source} {args.identifier}")
    if record is None:
        print("  (no current row: history only)")
    else:
        state = "DELETED (tombstone)" if record["deleted"] else "live"
        print(f"  state         {state}")
        print(f"  datestamp     {_ts(record['datestamp'])}  (as sent: {record['datestamp_raw'] or '-'})")
        print(f"  sets          {_text(record['set_specs'])}")
        print(f"  prefix        {record['metadata_prefix'] or '-'}")
        if not record["deleted"]:
            for f in DESCRIPTIVE_COLUMNS:
                if record.get(f) not in (None, [], ""):
                    print(f"  {f:<13} {_text(record[f])[:200]}")
        w = record["written_by"]
        what = {
            "window": f"window {w['label']}",
            "full": f"full harvest {w['label']}",
            "selected": f"re-harvest of selected records {w['label']}",
            "remap": f"remap of the stored XML {w['label']} (no request to the server)",
            "reconcile": "reconciliation: absent from the upstream listing",
        }.get(w["kind"], w["label"])
        print(f"  written by    {what}, run {w['run_id']}, at {_ts(w['at'])}")
        print(f"  first seen    {_ts(record['first_seen_at'])}")
    # Not "received": a reconciliation's deletion and a remap's rewrite are rows the server did not send.
    print(f"History ({len(history)} {'row' if len(history) == 1 else 'rows'}, oldest first)")
    header = f"  {'received_at':<20}  {'action':<11}  {'datestamp':<20}  {'window':<29}  run"
    print(header)
    for h in history:
        print(
            f"  {_ts(h['received_at']):<20}  {h['action']:<11}  {_ts(h['datestamp']):<20}  "
            f"{h['window'][:29]:<29}  {h['run_id'] or '-'}"
        )
    return 0
