"""CLI: `python -m harvest_pipeline.demo [flags]` serves the demo provider until SIGTERM/SIGINT.

Prints exactly one line to stdout once it is ready (process.py waits for it):
`demo provider listening on http://HOST:PORT/oai (N records, ...)`.

Fault modes (faults.py): `--fault KEY=VALUE` (repeatable, e.g. `--fault fail_every=3`) and
`--faults PRESET` (`all-recoverable` or `none`); the preset is applied first.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from datetime import date

from .corpus import SETS, Corpus, CorpusConfig
from .faults import PRESETS, active_faults, fault_field_names, preset
from .server import ServerOptions, make_server, start_in_thread

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765  # same value as harvest_pipeline.demo.DEFAULT_PORT (kept import-light)


def build_parser() -> argparse.ArgumentParser:
    d = ServerOptions()
    c = CorpusConfig()
    p = argparse.ArgumentParser(prog="python -m harvest_pipeline.demo",
                                description="Local demo OAI-PMH 2.0 data provider (synthetic, deterministic).")
    p.add_argument("--host", default=DEFAULT_HOST)
    p.add_argument("--port", type=int, default=DEFAULT_PORT, help="0 picks a free port")
    p.add_argument("--page-size", type=int, default=d.page_size)
    p.add_argument("--token-ttl", type=int, default=d.token_ttl, help="resumptionToken lifetime, seconds")
    p.add_argument("--days", type=int, default=c.days, help="length of the rolling window")
    p.add_argument("--records-per-day", type=int, default=c.records_per_day)
    p.add_argument("--end-day", type=date.fromisoformat, default=None,
                   help="last day of the window, YYYY-MM-DD (default: the clock's day)")
    p.add_argument("--seed", type=int, default=c.seed)
    p.add_argument("--granularity", choices=("seconds", "day"), default=d.granularity)
    p.add_argument("--now", default=None, help="freeze the provider clock (ISO datetime, Z = UTC)")
    p.add_argument("--complete-list-size-bias", type=int, default=d.complete_list_size_bias,
                   help="added to the reported completeListSize (a lying server)")
    p.add_argument("--fault", action="append", default=[], metavar="KEY=VALUE",
                   help="switch on a fault mode (repeatable); keys: " + ", ".join(fault_field_names())
                   + " (see harvest_pipeline/demo/faults.py)")
    p.add_argument("--faults", choices=sorted(PRESETS), default=None,
                   help="a preset of fault modes, applied before --fault (see faults.py)")
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return p


def parse_faults(items: list[str]) -> dict[str, str]:
    """`["fail_every=3", ...]` -> {"fail_every": "3"}; ValueError on a malformed item."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--fault wants KEY=VALUE, got {item!r}")
        key = key.strip().replace("-", "_")
        if key not in fault_field_names():
            raise ValueError(f"--fault: unknown fault {key!r} (known: {', '.join(fault_field_names())})")
        out[key] = value.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Handlers first, so a signal during the corpus build also ends in a clean exit 0.
    stop = threading.Event()

    def _on_signal(signum, frame):  # serve in a thread so the main thread can call shutdown()
        stop.set()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    try:
        config = CorpusConfig(days=args.days, records_per_day=args.records_per_day,
                              end_day=args.end_day, seed=args.seed)
        options = ServerOptions(page_size=args.page_size, token_ttl=args.token_ttl, granularity=args.granularity,
                                complete_list_size_bias=args.complete_list_size_bias)
        if args.faults:
            options = options.replace(**preset(args.faults))
        options = options.replace(**parse_faults(args.fault))
        corpus = Corpus(config, now=args.now)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if stop.is_set():
        return 0
    try:
        server = make_server(corpus, options, host=args.host, port=args.port, verbose=args.verbose)
    except OSError as e:  # typically: the port is taken
        print(f"error: cannot listen on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    thread = start_in_thread(server)
    s = corpus.stats()
    clock = f"clock frozen at {s['now']}" if corpus.frozen else "live clock"
    print(f"demo provider listening on {server.url} ({s['total']} records: {s['live']} live, "
          f"{s['deleted']} deleted; {config.days} days x {config.records_per_day}/day to {corpus.end_day}; "
          f"sets {', '.join(spec for spec, _, _ in SETS)}; granularity {options.granularity}; "
          f"page size {options.page_size}; {clock}"
          + "".join(f"; fault {k}={v}" for k, v in active_faults(options).items()) + ")", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
