"""The window asset factory: one `harvest/<source_id>` asset per source, partitioned by window."""


import warnings
from contextlib import contextmanager
from datetime import datetime, timezone

import dagster as dg
from dagster_duckdb import DuckDBResource

from harvest_pipeline.defs.checks import (
    CHECK_DESCRIPTIONS,
    check_evaluation,
    check_result,
    check_specs,
    materialization_target,
    range_summary,
)
from harvest_pipeline.defs.partitions import closed_windows, partitions_for
from harvest_pipeline.defs.report import progress_logger, report_metadata, reports_metadata
from harvest_pipeline.defs.resources import catalogue_connector, catalogue_path
from harvest_pipeline.errors import DeferredError, HarvestError
from harvest_pipeline.harvest import stop
from harvest_pipeline.harvest.server_facts import describe_server, read_facts, remember
from harvest_pipeline.harvest.source_lock import SourceLock
from harvest_pipeline.harvest.watermark import advance_stored_many
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import transaction


def asset_key_for(source_id: str) -> dg.AssetKey:
    return dg.AssetKey(["harvest", source_id])


def pool_for(source_id: str) -> str:
    # One pool per source (limit 1 in dagster.yaml): a source's windows harvest one at a time,
    # which keeps us polite and its staging folders uncontended, while sources run side by side.
    return f"harvest_{source_id}"


def _what(source: SourceConfig) -> str:
    if source.csw is not None:
        return (
            f"CSW GetRecords of {source.url} (typeNames={source.csw.type_names}, "
            f"outputSchema={source.csw.output_schema}, window on {source.csw.modified_queryable})"
        )
    return (
        f"OAI-PMH ListRecords of {source.url} (metadataPrefix={source.metadata_prefix}"
        f"{', set=' + source.set if source.set else ''})"
    )


def window_asset_description(source: SourceConfig, start_note: str) -> str:
    """What the asset is (the first line is what the asset catalog shows) and where to look next."""
    return (
        f"Harvests {source.id}: {_what(source)}, one {source.window} window per partition, upserted into "
        f"the DuckDB catalogue, up to {source.windows_per_run} windows per run (`windows_per_run`), each "
        "with its own materialization and checks.\n\n"
        f"- **Partitions** tab: one per closed {source.window} window (first window: {start_note}). Select "
        "windows and *Materialize* to harvest them again; a range is typed with brackets, "
        "`[first...last]`.\n"
        "- **Checks** tab: `complete`, `no_duplicates` and `cursor_closed` for each window.\n"
        "- **Overview → Metadata → Plots**: records, live, deleted, pages and seconds per window. "
        "**Events**: what each run changed (created, updated, deletions as text) and the "
        "`changed_records` table.\n"
        "- **Automation → harvest_watermarks**: the sensor that launches closed windows and "
        "advances the watermark over verified ones.\n"
        f"- Shell: `harvest-pipeline status`, `harvest-pipeline show {source.id} IDENTIFIER`."
    )


def build_window_asset(source: SourceConfig, start: datetime, start_note: str) -> dg.AssetsDefinition:
    key = asset_key_for(source.id)
    partitions_def = partitions_for(source, start)

    # BackfillPolicy is a beta parameter of @asset in 1.13 (it works as documented: checked here).
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        decorate = dg.asset(
            key=key,
            partitions_def=partitions_def,
            check_specs=check_specs(key, partitions_def),
            pool=pool_for(source.id),
            # A UI backfill (and the sensor) runs up to `windows_per_run` windows per run, one after
            # another; each window still gets its own materialization and check results.
            backfill_policy=dg.BackfillPolicy.multi_run(max_partitions_per_run=source.windows_per_run),
            output_required=False,
            group_name="harvest",
            kinds={"duckdb", "csw" if source.protocol == "csw" else "oaipmh"},
            tags={"harvest/protocol": source.protocol},
            description=window_asset_description(source, start_note),
            metadata={"source_url": dg.MetadataValue.url(source.url), "window": source.window},
        )

    def window_asset(context: dg.AssetExecutionContext, duckdb: DuckDBResource):
        # Under `harvest-pipeline harvest`, SIGTERM/SIGINT stop at a page boundary (harvest/stop.py).
        with stop.handling_signals(), _sessions_closed_at_end():
            run = WindowRun(context, source, key, partitions_def, duckdb)
            keys = list(context.partition_keys)
            with run.source_lock():
                if len(keys) == 1:
                    # One window per run, as before ranged runs: its events carry the run's partition.
                    report = run.harvest(keys[0])
                    yield dg.MaterializeResult(metadata=report_metadata(context, report))
                    for name, verdict in report.checks.items():
                        yield check_result(name, verdict)
                    run.advance_watermark()
                    return
                yield from run.harvest_range(keys)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.BetaWarning)
        return decorate(window_asset)


@contextmanager
def _sessions_closed_at_end():
    from harvest_pipeline.store.session import close_all

    try:
        yield
    finally:
        close_all()  # the catalogue file is free for the sensor and other runs at once


def partition_windows(partitions_def, keys: list[str]) -> list:
    """The harvest Windows of these partition keys, in their order."""
    from harvest_pipeline.harvest import Window

    return [Window(tw.start, tw.end, key)
            for key, tw in ((k, partitions_def.time_window_for_partition_key(k)) for k in keys)]


class WindowRun:
    """The windows of one run: harvested one after another with one lister (one Identify per run)."""

    def __init__(self, context, source: SourceConfig, key: dg.AssetKey, partitions_def, duckdb: DuckDBResource,
                 *, progress=None):
        self.context, self.source, self.key, self.partitions_def = context, source, key, partitions_def
        self.db_path = catalogue_path(duckdb)
        self.connect = catalogue_connector(duckdb)
        # The harvest core (lxml, pyarrow, requests) is imported by the run that uses it, not at load.
        from harvest_pipeline.harvest.listers import lister_for

        self.lister = lister_for(source, state_dir=self.db_path.parent / "hosts")
        self.progress = progress or progress_logger(context, source.id)
        facts = read_facts(source, self.db_path)
        if facts is not None:
            # What the server said of itself when its facts were stored (kept current by the
            # server_facts_refresh schedule): the run asks no Identify (CSW: GetCapabilities and
            # the earliest record) of its own. A source without stored facts asks, and stores them.
            self.lister.assume({"granularity": facts.granularity, "earliest_datestamp": facts.earliest_datestamp,
                                "deleted_record": facts.deleted_record, "page_cap": facts.page_cap})
        self._facts_checked = facts is not None

    def harvest(self, partition_key: str):
        """One window's WindowReport; raises as harvest_window does (a deferral becomes a Failure without retries)."""
        from harvest_pipeline.harvest import harvest_partition

        self._remember_facts_once()
        try:
            return harvest_partition(
                self.source, self.windows([partition_key])[0], run_id=self.context.run.run_id,
                db_path=self.db_path, connect=self.connect, lister=self.lister, progress=self.progress,
            )
        except DeferredError as exc:
            # Not a verdict on the window: the sensor launches it again after the server's delay.
            raise dg.Failure(
                description=f"deferred: {exc}",
                metadata={"retry_after_seconds": round(exc.retry_after_seconds, 1)},
                allow_retries=False,
            ) from None

    @contextmanager
    def source_lock(self, held: SourceLock | None = None):
        """Hold the source's lock (harvest/source_lock.py) for the run: wait while another run has it.
        `held`: the source's lock, taken already (a batch run takes the free ones up front); released
        at the end all the same."""
        lock = held or SourceLock(self.db_path, self.source.id)
        if held is None and not lock.acquire(on_wait=lambda: self.context.log.info(
                f"{self.source.id}: another run is harvesting this source; waiting for it to finish")):
            raise dg.Failure(description=f"stopped by {stop.signal_name(stop.requested())} while waiting "
                             f"for another run of {self.source.id}", allow_retries=False)
        try:
            yield
        finally:
            lock.release()

    def windows(self, keys: list[str]) -> list:
        return partition_windows(self.partitions_def, keys)

    def run_windows(self, keys: list[str], recorder: "EventRecorder",
                    starting=None) -> tuple[dict[str, str], dict[str, list[str]]]:
        """Harvest `keys` in order, each recorded per partition through `recorder`; the caller
        advances the watermark (a batch run all its sources' at once: `advance_watermarks`).
        `starting`: what the windows start from (harvest/sequence.py StartingState), read by the
        caller while holding the source's lock; read by the harvest otherwise.

        harvest_windows (harvest/sequence.py) merges window N while window N+1 is fetched; its
        callback records window N. Returns (failed windows with their first error line, windows
        per failing check). A failing window is logged and the next one still runs."""
        from harvest_pipeline.harvest import harvest_windows

        failed: dict[str, str] = {}
        failing_checks: dict[str, list[str]] = {name: [] for name in CHECK_DESCRIPTIONS}
        position = {key: n for n, key in enumerate(keys, 1)}

        def window_done(outcome) -> None:
            partition_key = outcome.window.key
            if outcome.error is not None:
                failed[partition_key] = _first_line(outcome.error)
                if outcome.started:
                    at = f"{self.source.id} {partition_key} ({position[partition_key]}/{len(keys)}): {outcome.error}"
                    stopped = isinstance(outcome.error, stop.HarvestStopped)
                    self.context.log.warning(at) if stopped else self.context.log.error(at)
                return
            report = outcome.report
            for name, verdict in report.checks.items():
                if not verdict.passed and verdict.severity == "error":
                    failing_checks.setdefault(name, []).append(partition_key)
            recorder.record(self.key, partition_key, report)

        self._remember_facts_once()
        harvest_windows(
            self.source, self.windows(keys), run_id=self.context.run.run_id, db_path=self.db_path,
            connect=self.connect, lister=self.lister, progress=self.progress, on_window_done=window_done,
            starting=starting,
        )
        return failed, failing_checks

    def harvest_range(self, keys: list[str]):
        """Every window of a ranged run, each recorded per partition; fail at the end naming failures."""
        recorder = EventRecorder(self.context)
        try:
            failed, failing_checks = self.run_windows(keys, recorder)
            self.advance_watermark()
        finally:
            recorder.close()
        # Dagster wants each declared check once per run: a summary of the range (partition None).
        for name, bad in failing_checks.items():
            yield range_summary(name, keys, bad, failed)
        if stop.requested() is not None:
            raise dg.Failure(
                description=f"stopped by {stop.signal_name(stop.requested())}: {len(keys) - len(failed)} of "
                f"{len(keys)} windows done; the stopped window resumes from its last committed page when it runs again",
                metadata={"failed_windows": dg.MetadataValue.json(failed)},
                allow_retries=False,
            )
        if failed:
            raise dg.Failure(
                description=failed_windows_text(failed, len(keys)),
                metadata={"failed_windows": dg.MetadataValue.json(failed)},
                allow_retries=False,
            )

    def advance_watermark(self) -> None:
        advance_watermarks([self])

    def _remember_facts_once(self) -> None:
        """A source's first harvest stores its server facts (a refresh updates them later)."""
        if self._facts_checked:
            return
        self._facts_checked = True
        try:
            remember(self.source, self.db_path, describe_server(self.source, lister=self.lister),
                     learned_by=f"first harvest (run {self.context.run.run_id[:8]})")
        except Exception as exc:  # noqa: BLE001 - the window itself reports the server's error
            self.context.log.warning(f"{self.source.id}: server facts not learned: {_first_line(exc)}")


def advance_watermarks(runs: list[WindowRun]) -> None:
    """Advance the watermarks of the runs' sources over their verified windows, in one transaction
    (runs of one catalogue); a catalogue that refuses is said in the log, and the next run, the CLI
    or `status` catches up."""
    if not runs:
        return
    now = datetime.now(timezone.utc)
    windows = {run.source.id: closed_windows(run.partitions_def, now) for run in runs}
    try:
        with runs[0].connect() as con, transaction(con):
            advance_stored_many(con, windows)
    except HarvestError as exc:
        runs[0].context.log.warning(f"{', '.join(windows)}: watermark not advanced this time: {exc}")


class EventRecorder:
    """Writes each window's materialization and check results to the instance in one worker
    thread, in order, while the next window is harvested: each event is a few SQLite commits in
    Dagster's default storage, which would otherwise be added to every window's time. One
    recorder serves every source of a run. close() waits for all of them (and raises what failed).
    The windows waiting when the thread comes to them are taken together: their metadata's
    catalogue facts are read at once (a batch run's windows are merged in groups, and end so)."""

    def __init__(self, context):
        from collections import deque
        from concurrent.futures import ThreadPoolExecutor

        self.context = context
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="window-events")
        self.pending = []
        self.waiting: deque = deque()  # (asset key, partition key, report), in the order recorded

    def log_info(self, text: str) -> None:
        """A log line written by the events thread: Dagster's log handlers write each line to the
        instance under one lock, which harvesting threads would otherwise queue for."""
        self.pool.submit(self.context.log.info, text)

    def record(self, asset_key: dg.AssetKey, partition_key: str, report) -> None:
        self.waiting.append((asset_key, partition_key, report))
        self.pending.append(self.pool.submit(self._log_waiting))

    def _log_waiting(self) -> None:
        # The one worker thread takes what waits (deque pops are atomic); a later task whose
        # windows were taken already finds nothing.
        taken = []
        while self.waiting:
            taken.append(self.waiting.popleft())
        if not taken:
            return
        # The metadata reads the catalogue (the windows' live and deleted records): here, not
        # between two windows, where it would add a catalogue open to each window's time.
        try:
            metadata = reports_metadata(self.context, [report for *_, report in taken])
        except Exception:  # noqa: BLE001 - each window's own then, so one window's error stays its own
            metadata = [None] * len(taken)
        failed = []
        for (asset_key, partition_key, report), window_metadata in zip(taken, metadata):
            try:
                self._log(asset_key, partition_key, report,
                          report_metadata(self.context, report) if window_metadata is None else window_metadata)
            except Exception as exc:  # noqa: BLE001 - the other windows are still recorded; raised by close()
                failed.append(exc)
        if failed:
            raise failed[0]

    def _log(self, asset_key: dg.AssetKey, partition_key: str, report, metadata: dict) -> None:
        checks = report.checks
        self.context.log_event(dg.AssetMaterialization(asset_key=asset_key, partition=partition_key, metadata=metadata))
        # Each result points at the window's materialization just stored, as Dagster's own results
        # do: the project's event log remembers its storage id; any other storage is asked.
        take = getattr(self.context.instance.event_log_storage, "take_stored_materialization", None)
        stored = take(asset_key, partition_key) if take else None
        if stored is None:
            latest = self.context.instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=asset_key, asset_partitions=[partition_key]), limit=1,
            ).records
            stored = latest[0] if latest else None
        target = materialization_target(stored) if stored else None
        for name, verdict in checks.items():
            self.context.log_event(check_evaluation(asset_key, name, verdict, partition_key, target))

    def close(self) -> None:
        self.pool.shutdown(wait=True)
        for future in self.pending:
            future.result()  # re-raise a storage error here, in the step


def failed_windows_text(failed: dict[str, str], total: int) -> str:
    shown = "; ".join(f"{k}: {why}" for k, why in list(failed.items())[:10])
    return (
        f"{len(failed)} of {total} windows failed ({shown}{'; ...' if len(failed) > 10 else ''}). The other "
        "windows are recorded; the sensor retries the failed ones alone, with backoff."
    )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
