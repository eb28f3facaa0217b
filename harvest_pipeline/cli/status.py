"""`harvest-pipeline status`: watermark, lag, counts, last run and checks per source."""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone

from harvest_pipeline.cli.common import json_default


def register(sub) -> None:
    s = sub.add_parser("status", help="watermark, lag, counts and last run per source")
    s.add_argument("--json", action="store_true")
    s.set_defaults(func=cmd_status)


def cmd_status(args: argparse.Namespace) -> int:
    from harvest_pipeline.http.redaction import redact_text
    from harvest_pipeline.sources import load_sources
    from harvest_pipeline.store import connect, default_db_path, ledger
    from harvest_pipeline.store.connection import catalogue_exists
    from harvest_pipeline.store.staging import open_staging_files, staging_window_start, window_is_locked
    from harvest_pipeline.store.status import failing_windows, source_summary

    sources = load_sources()
    db_path = default_db_path()
    now = datetime.now(timezone.utc).replace(tzinfo=None)
    out = []
    staging = {s.id: {p: staging_window_start(p) for p in open_staging_files(db_path, s.id)} for s in sources}
    if not catalogue_exists(db_path):
        summaries = [{"source_id": s.id, "watermark": None, "live": 0, "deleted": 0, "unmapped": 0, "unmapped_reasons": [],
                      "windows": {}, "last_run": None} for s in sources]
        failing = {s.id: [] for s in sources}
        ledger_rows = {}
    else:
        with connect(db_path) as con:
            summaries = [source_summary(con, s.id) for s in sources]
            failing = {s.id: failing_windows(con, s.id) for s in sources}
            ledger_rows = {
                path: ledger.get_window(con, source_id, start)
                for source_id, files in staging.items() for path, start in files.items()
            }
    for s, summary in zip(sources, summaries):
        wm = summary["watermark"]
        summary["lag_seconds"] = (now - wm).total_seconds() if wm else None
        summary["url"] = redact_text(s.url)  # the source's secrets are registered at load
        summary["window"] = s.window
        summary["open_cursors"] = []
        for p, start in staging[s.id].items():
            running = window_is_locked(p)
            if not running and not p.exists():
                continue  # merged and removed by its run since it was listed: no open cursor
            summary["open_cursors"].append({
                # The partition key the UI and `harvest --from` use, not the staging folder's name.
                "window": ledger_rows[p].partition_key if ledger_rows.get(p) else _partition_key(start),
                "window_start": start,
                "state": "running" if running else "interrupted",
            })
        summary["failing_windows"] = [{"window": w, "status": st, "error": redact_text(e) if e else e}
                                      for w, st, e in failing[s.id]]
        out.append(summary)
    if args.json:
        print(json.dumps(out, default=json_default, indent=2))
        return 0
    for s in out:
        wm = s["watermark"].isoformat() + "Z" if s["watermark"] else "(none yet)"
        lag = f"{s['lag_seconds'] / 3600:.1f} h" if s["lag_seconds"] is not None else "-"
        print(f"{s['source_id']}  ({s['url']}, {s['window']} windows)")
        print(f"  watermark   {wm}   lag {lag}")
        print(f"  records     {s['live']} live, {s['deleted']} deleted")
        if s["unmapped"]:
            print(f"  ! {s['unmapped']} live record(s) stored raw, no mapper read them; commonest: "
                  + "; ".join(f"{reason[:120]} ({n})" for reason, n in s["unmapped_reasons"]))
            print(f"    a mapper for their format (README \"Adding a format\"), then "
                  f"`harvest-pipeline remap {s['source_id']}`, maps them from the stored XML")
        ws = ", ".join(f"{k} {v}" for k, v in sorted(s["windows"].items())) or "none harvested"
        print(f"  windows     {ws}")
        lr = s["last_run"]
        if lr:
            when = lr["finished_at"] or lr["started_at"]
            print(
                f"  last run    {lr['window']} {lr['status']} at {when:%Y-%m-%d %H:%M:%S}Z "
                f"(run {lr['run_id']}); checks: " + ", ".join(f"{k} {v}" for k, v in lr["checks"].items())
            )
        for w in s["failing_windows"]:
            print(f"  ! {w['window']} {w['status']}: {w['error'][:160]}")
        if s["open_cursors"]:
            listed = ", ".join(f"{c['window']} ({c['state']})" for c in s["open_cursors"])
            print(f"  open cursors: {listed}  (an interrupted one resumes when its window runs again)")
    return 0


def _partition_key(start: datetime) -> str:
    """A window's key as Dagster names it, for a staging folder the ledger has no row for."""
    return start.strftime("%Y-%m-%d" if start.hour == 0 and start.minute == 0 else "%Y-%m-%d-%H:%M")
