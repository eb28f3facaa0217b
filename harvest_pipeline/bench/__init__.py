"""Benchmark of the harvester against the demo OAI-PMH provider: ``python -m harvest_pipeline.bench``.

Install the contenders first (once): ``.venv/bin/pip install -e '.[bench]'`` (sickle, oaipmh-scythe,
psutil; ``pip install pyinstrument`` for ``--profiler pyinstrument``). A missing library only
turns its contender into an ERROR row.

Commands
--------
::

    # smoke run: tiny window, 1 run, no warm-up (seconds)
    python -m harvest_pipeline.bench --quick
    # the contender table on a medium window
    python -m harvest_pipeline.bench --records 50000 --page-size 200 --runs 3
    # everything at full size (on a quiet machine; takes a while: the 365-window CLI backfill alone
    # is several minutes, the 1M-record window a few more)
    python -m harvest_pipeline.bench --all --json bench.json
    # one section only, no contender table
    python -m harvest_pipeline.bench --no-contenders --rss --rss-sizes 100000,1000000

What it does
------------
It starts the demo provider (a subprocess) with a corpus of ONE closed day of ``--records``
records (``--days 1 --records-per-day N``, clock frozen at the next midnight) and a page size of
``--page-size``, then runs every contender ``--runs`` times against the same endpoint and window,
each run in its own child process (``python -m harvest_pipeline.bench.run_one NAME``), rounds
interleaved. It prints: contender, records, records/s (median, min, max over runs), the child's
peak RSS (VmHWM, the kernel's ru_maxrss of the child since its exec: interpreter + imports + run) and the ratio to the fetch-only baseline.

Contenders (``--only a,b,...``; default all, in this order):

==========  ==============================================================================
fetch-only  requests.Session GET loop, resumptionToken by bytes regex, no XML parse (the limit)
sickle      Sickle(url, iterator=OAIItemIterator).ListRecords(...), every record iterated
scythe      oaipmh-scythe Scythe(url).list_records(...), every record iterated
client      our OAIClient.list_records_pages(read_ahead=True) over the window, each record touched
harvest     our harvest_window(): token loop -> staging DuckDB -> merge, fresh catalogue per run
dagster     the same via build_definitions([source]) + execute_in_process(partition_key=...) on a
            temporary (sqlite) instance; its overhead over ``harvest`` is printed separately
==========  ==============================================================================

Flags
-----
Contender table: ``--records N`` (default 100,000), ``--page-size P`` (200), ``--runs R`` (5),
``--warmup W`` (1 unmeasured fetch-only pass), ``--only NAMES``, ``--no-contenders``, ``--quick``
(2,000 records, page size 100, 1 run, no warm-up, and tiny sizes for every section below).

Sections (each only when asked; ``--all`` = all of them), each with its own table:

``--rss``
    peak RSS of harvest_window on one window of each of ``--rss-sizes`` (100000,1000000), page
    size ``--rss-page-size`` (500), ``--rss-runs`` (1); per phase (token loop, merge); plus a
    what-if row with DuckDB settings injected in the child (``--rss-what-if``, default
    ``{"memory_limit": "256MB"}``, ``none`` to skip). A child above ``--rss-cap-mb`` (8000) is
    killed and reported as over the cap. Target: 1M window < 250 MB and flat vs 100k.
``--upsert``
    merge_staging throughput: ``--upsert-rows`` N (100,000) staged rows into a catalogue of
    ``--upsert-existing`` M (1,000,000) rows; scenarios created / updated / unchanged; rows/s.
    Then the merge cost of a small window against the catalogue's size: ``--upsert-window`` W
    (150; 0 skips) rows merged into an empty catalogue vs into a source of
    ``--upsert-window-existing`` S (2,000,000) stored rows, as new records and as new versions.
    Target: at most 2x the merge into an empty catalogue. ``--upsert-rows 0`` runs only this part.
``--backfill``
    ``--backfill-days`` (365) daily windows of ``--backfill-records-per-day`` (150) records,
    ``--backfill-modes`` cli,direct: the CLI (``harvest-pipeline harvest``: ranged runs of
    ``windows_per_run`` windows, ``--backfill-windows-per-run`` to change it; HARVEST_* and
    DAGSTER_HOME in temp folders; the windows materialized and checked per partition are counted
    in the instance afterwards) and harvest_window in a loop (no Dagster). Seconds, seconds per
    window, overhead per window. Targets: < 5 min for 365; CLI <= 1.2x the direct loop.
``--events``
    a window's Dagster events (a materialization and three check results) written ``--events-windows``
    (100) times in a fresh process per variant: Dagster's default SQLite event log vs the project's
    dagster.yaml (``defs/event_log.py``), ``--events-runs`` (3) interleaved runs; milliseconds per
    window and the ratio.
``--defs-load``
    ``--defs-sources`` (200) sources pointing at a listening socket that counts connections;
    ``--defs-runs`` (5) fresh-process loads of ``harvest_pipeline.definitions`` against a bare
    ``import dagster``, interleaved. Targets: 0 connections per load; load <= 2x the bare import.
``--daemon``
    a latency-bound source (the demo's ``slow_ms`` = ``--daemon-delay-ms``, 800) of
    ``--daemon-days`` (40) daily windows of about two ListRecords pages, brought up to date by
    ``dagster dev`` (port ``--daemon-port``, 3390) with its sensor on, nobody touching the UI.
    Wall time vs pages x delay. Target: <= 1.3x.
``--sources``
    ``--sources-levels`` (1,2,5,10,20) sources at once, each a separate process harvesting one
    window of ``--sources-records`` (10,000) from its own provider on its own loopback address,
    one shared catalogue; total records/s and CPU share per level, ``--sources-runs`` (1).
``--many-sources [N]``
    N (100; ``--quick`` 10) latency-bound sources brought up to date at once by ``dagster dev``
    alone: one provider-farm process (``provider_farm``) serves a demo provider per source, each
    on its own loopback address (127.0.0.2 on; past .254, 127.0.1.1 on), ``--many-days`` (3)
    closed daily windows of ``--many-records-per-day`` (100), page size ``--many-page-size``
    (50), ``--many-delay-ms`` (2000) per response. ``--many-max-runs`` (``shipped``) is a comma list of
    max_concurrent_runs to measure (``shipped`` = dagster.yaml as it is). Wall time and records/s
    against one source's own server time (pages x delay), whole-machine peak memory, the
    ``dagster dev`` tree's and the farm's RSS. Targets: >= 80% of server-bound; <= 8 GB.
    ``--many-catalogue postgres``: the runs write a shared catalogue in a throwaway PostgreSQL on
    127.0.0.1 (``--many-pg-max-connections``, 100 as PostgreSQL ships) and its sessions are counted
    every 0.1 s: the peak, per application_name, and what they were doing at the peak.
``--big-page``
    ONE ListRecords page of ``--big-page-mb`` (40) MB from the demo provider, fetched, parsed,
    mapped and turned into Arrow rows in a child process (contender ``page-rows``, no staging):
    peak RSS, RSS after imports, and the growth in multiples of the page's bytes.
``--profile``
    harvest_window on ``--profile-records`` (50,000) under ``--profiler`` cprofile|pyinstrument
    (``--profile-contender dagster`` profiles the Dagster path instead): time per stage, top
    functions, suggestions.

Output and housekeeping: ``--json PATH`` (every number), ``--workdir DIR`` / ``--keep`` (keep the
scratch files: catalogues, logs, profiles), ``--timeout S`` per child (3600).

The last table is the targets, PASS/MISS with the numbers: full harvest >= Sickle; our client
>= 2x Sickle; full harvest >= 60% of fetch-only; 1M-record window peak RSS < 250 MB (--rss);
365-window backfill < 5 min (--backfill); throughput grows with sources until CPU saturates
(--sources). Progress goes to stderr, tables to stdout. Numbers on a busy machine are noisy:
compare medians from the same invocation, not across machines.

Modules: ``__main__`` (CLI), ``spec`` (provider + window spec), ``contenders``, ``run_one`` (child),
``measure`` (children, median/min/max), ``report`` (tables, targets), ``*_section`` (extra
sections), ``backfill_runner`` (the direct backfill's child process).
"""
