"""Many demo providers in ONE process: ``python -m harvest_pipeline.bench.provider_farm --count N ...``.

Used by the ``--many-sources`` section. A hundred ``python -m harvest_pipeline.demo`` processes
would cost about 100 x 40 MB and a hundred interpreter start-ups on the same cores the harvest
needs; the providers are not what is measured. So one process binds N ThreadingHTTPServers, server
k on its own loopback address, the (first_host + k)-th (a different host per source, as in real
life; the harvester's per-host politeness then applies per source), each with its own corpus and
options, and serves them from threads (past 127.0.0.254 the addresses go on in 127.0.1.1 ..
127.0.1.254 and so on: Linux answers for all of 127.0.0.0/8 on its loopback interface). A
response's ``slow_ms`` delay sleeps in that request's thread, so N servers wait in parallel. Each server keeps the demo's /admin endpoints (the parent
switches the delay on with POST /admin/options once the facts are stored).

Prints one line ``FARM_READY {json}`` (the URLs) to stdout once every server listens, then serves
until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from datetime import date

READY_PREFIX = "FARM_READY "
# Loopback addresses numbered from 1: 127.0.0.1 .. 127.0.0.254, then 127.0.1.1 .. 127.0.1.254, ...
HOSTS_PER_BLOCK = 254
MAX_HOSTS = HOSTS_PER_BLOCK * 256


def loopback_host(n: int) -> str:
    """The n-th loopback address (n >= 1), skipping each block's .0 and .255."""
    if not 1 <= n <= MAX_HOSTS:
        raise ValueError(f"loopback address number {n} is outside 1 .. {MAX_HOSTS}")
    block, offset = divmod(n - 1, HOSTS_PER_BLOCK)
    return f"127.0.{block}.{offset + 1}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m harvest_pipeline.bench.provider_farm")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--first-host", type=int, default=2,
                   help="server k listens on the (first_host + k)-th loopback address (loopback_host)")
    p.add_argument("--days", type=int, required=True)
    p.add_argument("--records-per-day", type=int, required=True)
    p.add_argument("--page-size", type=int, required=True)
    p.add_argument("--end-day", type=date.fromisoformat, required=True)
    p.add_argument("--now", required=True, help="frozen provider clock (ISO)")
    p.add_argument("--token-ttl", type=int, default=7 * 86400)
    args = p.parse_args(argv)
    if args.first_host < 1 or args.first_host + args.count - 1 > MAX_HOSTS:
        print(f"error: the hosts must stay within 127.0.0.1 .. {loopback_host(MAX_HOSTS)}", file=sys.stderr)
        return 2

    from harvest_pipeline.demo.corpus import Corpus, CorpusConfig
    from harvest_pipeline.demo.server import ServerOptions, make_server, start_in_thread

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    servers, threads = [], []
    try:
        for k in range(args.count):
            corpus = Corpus(CorpusConfig(days=args.days, records_per_day=args.records_per_day,
                                         end_day=args.end_day), now=args.now)
            options = ServerOptions(page_size=args.page_size, token_ttl=args.token_ttl)
            host = loopback_host(args.first_host + k)
            try:
                server = make_server(corpus, options, host=host, port=0)
            except OSError as e:
                print(f"error: cannot listen on {host}: {e}", file=sys.stderr)
                return 1
            servers.append(server)
            threads.append(start_in_thread(server))
        print(READY_PREFIX + json.dumps({"urls": [s.url for s in servers]}), flush=True)
        while not stop.wait(0.5):
            pass
    finally:
        # The serving threads are daemons: closing the sockets and leaving is enough (a shutdown()
        # per server would wait for each one's poll interval in turn).
        for s in servers:
            s.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
