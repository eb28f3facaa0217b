"""The job `harvest_windows`: one run harvests windows of many sources at once.

A harvest spends nearly all its time waiting for servers, and a Dagster run process costs a few
hundred MB and a few CPU-seconds to start. So the watermark sensor puts the due windows of up to
`HARVEST_SOURCES_PER_RUN` (default 100) sources into one run: one thread per source, that source's
windows one after another (its lock held, harvest/source_lock.py), the sources side by side (as many
at a time as the process may open files for: harvest_pipeline/open_files.py). Each window is still
its own: its own traversal, cursor, ledger row, and its own materialization and check results logged
against its source's asset `harvest/<id>` and partition, exactly as a ranged run of that asset logs
them. A failing window fails neither the other windows nor the other sources; the run fails at the
end, naming them, and the sensor retries them with backoff.

Run config (the sensor writes it; the launchpad accepts it too):
    ops: {harvest_source_windows: {config: {windows: {<source id>: [<window key>, ...]}}}}
"""


import gc
import os
import threading
from concurrent.futures import ThreadPoolExecutor

import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from harvest_pipeline import open_files
from harvest_pipeline.defs.assets import (
    EventRecorder, WindowRun, advance_watermarks, asset_key_for, failed_windows_text, partition_windows,
)
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.defs.report import progress_logger
from harvest_pipeline.harvest import stop
from harvest_pipeline.harvest.source_lock import SourceLock
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store.connection import THREADS_ENV
from harvest_pipeline.store.session import close_all as close_sessions

BATCH_JOB = "harvest_windows"
BATCH_OP = "harvest_source_windows"
SOURCES_TAG = "harvest/sources"


# A batch run writes four events per window (a materialization, three check results), which
# Dagster logs at DEBUG: its console logger formatted each one again into the run's stderr, 14% of
# the events thread's CPU samples in the 100-source bench. The events themselves are stored as
# always (the UI's run view and every check read them); the console keeps INFO and above.
BATCH_CONSOLE = {"console": {"config": {"log_level": "INFO"}}}


def batch_run_config(windows: dict[str, list[str]]) -> dict:
    return {"ops": {BATCH_OP: {"config": {"windows": {sid: list(keys) for sid, keys in windows.items()}}}},
            "loggers": BATCH_CONSOLE}


def batch_windows(run_config: dict) -> dict[str, list[str]]:
    """The windows a run of `harvest_windows` covers, per source (empty for other runs)."""
    try:
        return dict(run_config["ops"][BATCH_OP]["config"]["windows"])
    except (KeyError, TypeError):
        return {}


def batch_tags(windows: dict[str, list[str]]) -> dict[str, str]:
    """What the Runs list shows of a batch run: its sources (tag values stay short)."""
    ids = sorted(windows)
    shown = ",".join(ids)
    if len(shown) > 200:
        shown = ",".join(ids[:10]) + f",... ({len(ids)} sources)"
    return {SOURCES_TAG: shown, "harvest/windows": str(sum(len(k) for k in windows.values()))}


class BatchConfig(dg.Config):
    windows: dict[str, list[str]] = Field(
        description="per source id, the partition keys of the windows to harvest, in order",
    )


def build_batch_job(sources: list[SourceConfig], partitions_by_source: dict) -> dg.JobDefinition:
    by_id = {s.id: s for s in sources}

    @dg.op(
        name=BATCH_OP,
        description="Harvest the configured windows of several sources at once: a thread per source, its "
        "windows one after another, each logged as a materialization (and check results) of harvest/<id>.",
    )
    def harvest_source_windows(context: dg.OpExecutionContext, config: BatchConfig, duckdb: DuckDBResource) -> None:
        unknown = sorted(set(config.windows) - set(by_id))
        if unknown:
            context.log.error(f"not in the sources file (skipped): {', '.join(unknown)}")
        plan = {sid: keys for sid, keys in config.windows.items() if sid in by_id and keys}
        recorder = EventRecorder(context)
        # One progress line every 10 s for the whole run, written by the events thread: a line
        # per source every few seconds would make 100 sources queue on Dagster's log handlers.
        progress = progress_logger(context, None, log=recorder.log_info, every=10.0)
        failed: dict[str, dict[str, str]] = {}
        harvested: list[WindowRun] = []  # their watermarks advance together at the end
        guard = threading.Lock()

        def harvest_source(source_id: str, held: SourceLock | None) -> None:
            source = by_id[source_id]
            try:
                run = WindowRun(context, source, asset_key_for(source_id), partitions_by_source[source_id], duckdb,
                                progress=progress)
                with run.source_lock(held=held):
                    held = None  # the run's own now: released when its windows are done
                    bad, _ = run.run_windows(plan[source_id], recorder, starting=starting.get(source_id))
                with guard:
                    harvested.append(run)
            except Exception as exc:  # noqa: BLE001 - a source that cannot start fails alone
                bad = {k: f"not started: {exc}" for k in plan[source_id]}
                context.log.error(f"{source_id}: {exc}")
            finally:
                if held is not None:
                    held.release()
            if bad:
                with guard:
                    failed[source_id] = bad

        # The sources' threads are the run's parallelism: DuckDB's own threads only add the CPU of
        # scheduling each small window's statements (~15% of a 100-record window's, measured).
        # Set before the process opens the catalogue; HARVEST_DUCKDB_THREADS wins when given.
        os.environ.setdefault(THREADS_ENV, "1")
        # What the process holds before harvesting (Dagster, the definitions) lives as long as
        # the run: out of the collector's sight, each full collection walks only what the harvest
        # allocates (100 sources x 3 windows: 0.7 s of collections instead of 1.5 s).
        gc.freeze()
        with stop.handling_signals():
            # Each source holds a few files open while it is harvested: as many at a time as the
            # process may open (its limit raised first where the system allows).
            at_once, file_limit = open_files.sources_at_once(len(plan))
            context.log.info(f"harvesting {sum(map(len, plan.values()))} window(s) of {len(plan)} source(s) "
                             + ("at once" if at_once == len(plan) else f"{at_once} at a time"))
            if at_once < len(plan):
                context.log.warning(
                    f"this process may open {file_limit} files, enough for {at_once} of the {len(plan)} sources at a "
                    f"time (about {open_files.FDS_PER_SOURCE} each): harvesting them {at_once} at a time. To harvest "
                    f"them all at once, start Dagster with `ulimit -n {open_files.files_needed(len(plan))}` or more, "
                    "or lower HARVEST_SOURCES_PER_RUN")
            locks: dict[str, SourceLock] = {}
            try:
                # The sources' locks that are free, taken here, and what their windows start from,
                # read for all of them at once (each source reading its own after its lock queued a
                # hundred of them on the catalogue, ~0.4 s before their first requests). A source
                # whose lock another run holds waits for it in its thread and reads its own, as
                # does a source that starts only once another is done (a lock is a file held open).
                locks = _free_source_locks(catalogue_path(duckdb), list(plan)[:at_once])
                starting = _starting_states(context, catalogue_connector(duckdb),
                                            {sid: partition_windows(partitions_by_source[sid], plan[sid]) for sid in locks})
                with ThreadPoolExecutor(max_workers=max(at_once, 1), thread_name_prefix="source") as pool:
                    for future in [pool.submit(harvest_source, sid, locks.pop(sid, None)) for sid in plan]:
                        future.result()
                # In one transaction: a hundred sources ending together, each advancing its own,
                # kept the catalogue busy about 1 s after the last response (measured).
                advance_watermarks(harvested)
            finally:
                for lock in locks.values():  # taken, never handed to a source's thread
                    lock.release()
                recorder.close()
                close_sessions()  # the catalogue file is free for the sensor and other runs at once
                gc.unfreeze()
        if failed:
            total = sum(len(k) for k in plan.values())
            flat = {f"{sid} {k}": why for sid, bad in failed.items() for k, why in bad.items()}
            raise dg.Failure(
                description=failed_windows_text(flat, total),
                metadata={"failed_windows": dg.MetadataValue.json(failed)},
                allow_retries=False,
            )

    @dg.job(
        name=BATCH_JOB,
        description="Harvest windows of many sources in one run (the watermark sensor launches these): each "
        "window is recorded as a partition of its source's asset harvest/<id>, with its own check results.",
    )
    def harvest_windows():
        harvest_source_windows()

    return harvest_windows


def _free_source_locks(db_path, source_ids: list[str]) -> dict[str, SourceLock]:
    """The locks of these sources that no other run holds, taken without waiting."""
    locks = {}
    try:
        for source_id in source_ids:
            lock = SourceLock(db_path, source_id)
            if lock.acquire(timeout=0):
                locks[source_id] = lock
    except BaseException:
        for lock in locks.values():
            lock.release()
        raise
    return locks


def _starting_states(context, connect, windows_by_source: dict) -> dict:
    """harvest_windows' StartingState of each source, read in two statements; {} when the catalogue
    cannot answer now (each source then reads its own, as a source whose lock was busy does)."""
    if not windows_by_source:
        return {}
    from harvest_pipeline.harvest.sequence import read_starting_states

    try:
        with connect() as con:
            return read_starting_states(con, windows_by_source)
    except Exception as exc:  # noqa: BLE001 - only a shortcut: the sources read their own
        context.log.warning(f"the windows' states were not read ahead ({exc}); each source reads its own")
        return {}
