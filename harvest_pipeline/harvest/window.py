"""Harvest one [start, end) window of one source: token loop -> staging -> merge -> verdict."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from concurrent.futures import Future
from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Callable

import duckdb

from harvest_pipeline.dates import parse_datestamp
from harvest_pipeline.errors import (
    BadResumptionToken, DeferredError, HarvestError, MalformedXMLError, ProtocolError, WindowBusyError,
)
from harvest_pipeline.crashpoints import crashpoint
from harvest_pipeline.harvest.budget import TraversalBudget, bind_time_budget
from harvest_pipeline.harvest.early_start import EarlyFirstPage, OnListEnd
from harvest_pipeline.harvest.grouped_writes import GroupedWriter
from harvest_pipeline.harvest import stop
from harvest_pipeline.harvest.listers import Lister, lister_for
from harvest_pipeline.harvest.plausibility import cap_future_datestamps
from harvest_pipeline.harvest.prefetch import FetchAhead, prefetch
from harvest_pipeline.harvest.rows import page_rows
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.sources.registry import TraversalLimits
from harvest_pipeline.store import connect as store_connect
from harvest_pipeline.store import ledger
from harvest_pipeline.store.backend import noting_retries, run_write
from harvest_pipeline.store.merge import LARGE_WINDOW_ROWS, MergeCounts
from harvest_pipeline.store.merge_group import StagedWindow
from harvest_pipeline.store.staging import STAGING_COMMIT_SECONDS, StagingWindow, staging_commit_rows, staging_path
from harvest_pipeline.store.window_parts import PartLedger, part_staging_path

Connect = Callable[[], AbstractContextManager[duckdb.DuckDBPyConnection]]
Progress = Callable[[dict], None]

log = logging.getLogger(__name__)

# Merges at once per process: each runs in its own transaction on its own cursor of the process's
# catalogue (store/session.py), with its staged files on that cursor; two keep both cores of a
# small machine busy, more only queue for them (and for memory: a merge may take DuckDB's limit).
MERGES_AT_ONCE = 2
# Taken by each merge transaction of the process (also the catalogue writer's, harvest/grouped_writes.py).
MERGE_SLOTS = threading.BoundedSemaphore(MERGES_AT_ONCE)

# How often an expired token may restart the window before we give up.
MAX_RESTARTS = 2
# How often a page that does not parse at all is fetched again before the window fails.
MAX_MALFORMED_REFETCHES = 2
# The server's final token starts the list again (pycsw 2.x in OAI-PMH mode): once seen with a
# completeListSize that proves the list was traversed, a restart without one ends the list too.
QUIRK_FINAL_TOKEN_RESTARTS_LIST = "final-token-restarts-list"


@dataclass(frozen=True)
class Window:
    start: datetime  # tz-aware UTC, inclusive
    end: datetime  # tz-aware UTC, exclusive
    key: str  # the Dagster partition key, used as the window's name everywhere

    def __str__(self) -> str:
        return self.key


def one_off_window(kind: str, *, start: datetime | None = None, now: datetime | None = None) -> Window:
    """The pseudo-window of a one-off run (a full harvest, a re-harvest, a remap), named
    `<kind>-<UTC time to the second>`: from `start` to now, or of zero length at now."""
    now = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).replace(microsecond=0)
    return Window(start or now, now, f"{kind}-{now:%Y-%m-%dT%H:%M:%SZ}")


@dataclass(frozen=True)
class CheckVerdict:
    passed: bool
    severity: str  # "error" | "warn"
    description: str
    metadata: dict = field(default_factory=dict)


@dataclass
class WindowReport:
    source_id: str
    window: Window
    status: str
    run_id: str
    attempt_id: str
    from_param: str
    until_param: str
    pages: int
    complete_list_size: int | None
    counts: MergeCounts
    duplicates: int
    duplicate_examples: list[str]
    cursor_closed: bool
    outside_window: int
    resumed: bool
    restarts: int
    warnings: list[str]
    seconds: float
    checks: dict[str, CheckVerdict]
    repaired: int = 0

    @property
    def passed(self) -> bool:
        return self.status in ledger.WATERMARK_PASSES


def _request_key(source: SourceConfig, from_param: str | None, until_param: str | None) -> str:
    """What a stored cursor belongs to: a cursor of a different request is not resumed."""
    what = [source.metadata_prefix, source.set or ""]
    if source.csw is not None:
        what = [source.csw.type_names, source.csw.output_schema, source.csw.modified_queryable, source.csw.extra_filter or ""]
    return "|".join([source.protocol, *what, from_param or "", until_param or ""])


def record_format_label(source: SourceConfig) -> str:
    """The `metadata_prefix` column: the OAI prefix, or the CSW outputSchema asked for."""
    return f"csw:{source.csw.output_schema}" if source.csw is not None else source.metadata_prefix


def evaluate_checks(
    *,
    counts: MergeCounts,
    complete_list_size: int | None,
    pages: int,
    duplicates: int,
    duplicate_examples: list[str],
    cursor_closed: bool,
    outside_window: int = 0,
) -> dict[str, CheckVerdict]:
    """The three per-window verdicts; the asset checks report exactly these."""
    checks: dict[str, CheckVerdict] = {}
    listed = counts.received + counts.quarantined_unparsed  # unreadable records were listed too
    if complete_list_size is not None and listed != complete_list_size and outside_window:
        # Servers that add records from outside the window do not count them in completeListSize.
        listed -= outside_window
    meta = {
        "received": counts.received, "stored": counts.stored, "complete_list_size": complete_list_size,
        "quarantined": counts.quarantined,
    }
    quarantine_note = f" ({counts.quarantined_unparsed} unreadable, kept in quarantine)" if counts.quarantined_unparsed else ""
    if complete_list_size is not None:
        ok = listed == complete_list_size and counts.stored == counts.distinct_received
        checks["complete"] = CheckVerdict(
            ok,
            "error",
            f"received {listed}{quarantine_note} and stored {counts.stored} of completeListSize {complete_list_size}",
            meta,
        )
    elif pages <= 1:
        # The whole list came in one response (or noRecordsMatch): nothing can be missing.
        ok = counts.stored == counts.distinct_received
        checks["complete"] = CheckVerdict(ok, "error", f"single-response list: received and stored {counts.stored}", meta)
    else:
        checks["complete"] = CheckVerdict(
            False,
            "warn",
            f"server gave no completeListSize: received {counts.received} over {pages} pages, stored "
            f"{counts.stored}; completeness cannot be proven",
            {**meta, "unproven": True},
        )
    checks["no_duplicates"] = CheckVerdict(
        duplicates == 0,
        "error",
        "no identifier listed twice" if duplicates == 0 else f"{duplicates} repeated listings, e.g. {duplicate_examples}",
        {"duplicates": duplicates},
    )
    checks["cursor_closed"] = CheckVerdict(
        cursor_closed,
        "error",
        "the list ended with an empty or absent token" if cursor_closed else "a resumption token is still open",
        {},
    )
    return checks


def _status_for(checks: dict[str, CheckVerdict]) -> str:
    if any(not c.passed and c.severity == "error" for c in checks.values()):
        return ledger.INCOMPLETE
    if not checks["complete"].passed:
        return ledger.UNPROVEN
    return ledger.VERIFIED


def harvest_window(
    source: SourceConfig,
    window: Window,
    *,
    run_id: str | None = None,
    db_path: str | Path,
    connect: Connect | None = None,
    lister: Lister | None = None,
    progress: Progress | None = None,
    full: bool = False,
    part: PartLedger | None = None,
) -> WindowReport:
    """Harvest `window` of `source` into the catalogue at `db_path`; resume if a cursor is open.

    `full=True` lists the whole source with no from/until (servers that cannot filter by date,
    periodic full refreshes); it is staged, merged and verified exactly like a window.

    `part`: `window` is a sub-window of a window that split itself (harvest/split.py); its row
    goes to `harvest_window_parts` and its cursor to its own staging folder.
    """
    harvest = WindowHarvest(source, window, run_id=run_id, db_path=db_path, connect=connect, lister=lister,
                            progress=progress, full=full, part=part)
    harvest.traverse()
    return harvest.merge()


class WindowHarvest:
    """`harvest_window` in its two phases, for callers that overlap them (harvest/sequence.py):

    - `traverse()`: the window's lock, its ledger row (`running`), the token loop into its staging
      folder until the list ends. Only the server is waited for here.
    - `merge()`: the staged pages into the catalogue, the verdict in the ledger row, the staging
      folder removed, the lock released; returns the report.

    Either phase that fails records the window failed (or deferred) and raises, as
    `harvest_window` does; a stopped traversal keeps its `running` row and cursor. Between the
    phases the window's lock stays held and its staging folder holds the whole, closed list: a crash
    there loses nothing (the next run finds the closed cursor and merges without refetching).
    `record_identify=False`: the caller already stored what the server said about itself.
    `quirks_known` (the stored quirks, as the window before read them, plus what it learned) and
    `submit_begin` (runs a function in the caller's catalogue-writer thread, returns its Future):
    the window's ledger row is written there while its first page is fetched; `traverse()` waits
    for it before it returns or records a failure. `writer` (harvest/grouped_writes.py): the
    process's catalogue writer, which then writes that row, and the merge of a small window,
    together with the other windows' writes that wait at the same time.
    """

    def __init__(self, source: SourceConfig, window: Window, *, run_id: str | None = None, db_path: str | Path,
                 connect: Connect | None = None, lister: Lister | None = None, progress: Progress | None = None,
                 full: bool = False, part: PartLedger | None = None, record_identify: bool = True,
                 quirks_known: set[str] | None = None, submit_begin: Callable[[Callable], Future] | None = None,
                 writer: GroupedWriter | None = None, early: EarlyFirstPage | None = None,
                 on_list_end: OnListEnd | None = None):
        self.source, self.window, self.db_path, self.full, self.part = source, window, db_path, full, part
        self.run_id = run_id or uuid.uuid4().hex
        self.connect = connect or (lambda: store_connect(db_path))
        self.lister, self.progress, self.record_identify = lister, progress, record_identify
        self.book = ledger if part is None else part  # where the window's row goes
        self.staging: StagingWindow | None = None
        self.started = time.monotonic()
        self.traversed = False
        self.begun = False  # its ledger row (and Identify, when asked) is written
        self.quirks_known, self.submit_begin, self.writer = quirks_known, submit_begin, writer
        self._begin: Future | None = None
        # harvest/early_start.py: this window's first page, maybe asked for already; what to do
        # once its own list has ended (ask for the next window's).
        self.early, self.on_list_end = early, on_list_end

    def traverse(self) -> None:
        """Begin the window and run its token loop until the list ended and is committed."""
        source, window, run_id = self.source, self.window, self.run_id
        try:
            # The window's lock comes first: a run that does not get it leaves the window's ledger
            # row to the run that holds it (it raises WindowBusyError and writes nothing).
            self.staging = staging = StagingWindow(
                staging_path(self.db_path, source.id, window.start) if self.part is None
                else part_staging_path(self.db_path, source.id, window.start, window.end)
            )
            lister = self.lister = self.lister or lister_for(source, state_dir=Path(self.db_path).parent / "hosts")
            bind_time_budget(lister, source.traversal, self.started)
            described = lister.describe()
            from_param, until_param = (None, None) if self.full else request_bounds(source, window, lister)
            self.from_param, self.until_param = from_param, until_param
            request_key = _request_key(source, from_param, until_param)

            row = dict(source_id=source.id, window_start=window.start, window_end=window.end,
                       partition_key=window.key, run_id=run_id, from_param=from_param, until_param=until_param)

            def identify(con):
                if self.record_identify:
                    ledger.record_identify(con, source.id, **described)

            def begin(con):
                identify(con)
                # Quirks that came with the window before were read once for the whole run (and
                # what it learned added): not read again for every window.
                known_quirks = ledger.get_quirks(con, source.id) if self.quirks_known is None else set()
                self.book.begin_window(con, **row)
                return known_quirks

            # A shared catalogue may refuse a write another worker's wrote across: run it again.
            what = f"source {source.id}, window {window.key}: begin"
            write_begin = lambda: run_write(self.connect, begin, what=what, log=log)  # noqa: E731
            if self.quirks_known is not None and (self.writer is not None or self.submit_begin is not None):
                # The quirks came with the window before: the ledger row is written by the
                # process's catalogue writer (or the caller's writer thread) while the first page
                # is fetched (joined below).
                # The catalogue writer writes the rows of the windows beginning together in one
                # UPDATE and one INSERT (store/backend.py upsert_rows_in_place).
                self._begin = (self.writer.upsert(*self.book.begin_row(**row), before=identify, what=what)
                               if self.writer is not None else self.submit_begin(write_begin))
                known_quirks = set(self.quirks_known)
            else:
                known_quirks = write_begin() | set(self.quirks_known or ())
                self.begun = True
                lister.apply_quirks(known_quirks)
                self.known_quirks = known_quirks

            cursor = staging.cursor()
            self.resumed = bool(cursor and cursor.request_key == request_key and (cursor.token or cursor.closed))
            if not self.resumed:
                staging.start_attempt(run_id, request_key)
            restarts = refetches = 0
            refetched_at = -1
            quirks = self.quirks = set(known_quirks)
            while not staging.cursor().closed:
                try:
                    _run_token_loop(source, window, lister, staging, from_param, until_param, self.progress, described, quirks,
                                    early=self.early, on_list_end=self.on_list_end)
                except BadResumptionToken as exc:
                    # Tokens expire: the only safe continuation is the window's from-bound again.
                    if restarts >= MAX_RESTARTS:
                        raise exc.with_context(hint="the server keeps expiring tokens; lower the page size or retry later") from None
                    restarts += 1
                    staging.start_attempt(run_id, request_key)
                    staging.add_warning(f"restarted the window after badResumptionToken at {exc.url}")
                except MalformedXMLError as exc:
                    # Often a cut connection or a server hiccup: the cursor still points at this page.
                    at_page = staging.cursor().pages
                    refetches = refetches + 1 if at_page == refetched_at else 1
                    refetched_at = at_page
                    if refetches > MAX_MALFORMED_REFETCHES:
                        raise exc.with_context(hint="the page stays malformed after refetching; report it to the server's maintainers") from None
                    staging.add_warning(f"page {at_page + 1} did not parse, fetched it again: {exc}")
            self.restarts = restarts
            self._join_begin()
            self.cursor = cursor = staging.cursor()
            if not self.full:
                behind = _server_clock_behind(window, cursor.response_date)
                if behind is not None:
                    # The next run must ask the server again: a record indexed after this traversal
                    # can land anywhere in the list, and completeness is proven per traversal.
                    staging.start_attempt(run_id, request_key)
                    raise behind
        except BaseException as exc:
            self._fail(exc)
        finally:
            if self.early is not None:
                self.early.discard()  # not taken (a resumed cursor, an error before the loop): closed
        self.traversed = True

    def merge(self) -> WindowReport:
        """Merge the traversed window into the catalogue and write its verdict; release the window."""
        if not self.traversed:
            raise RuntimeError(f"source {self.source.id}, window {self.window.key}: merge() before traverse()")
        source, window, run_id, staging, cursor = self.source, self.window, self.run_id, self.staging, self.cursor
        try:
            outside = staging.outside_window_count()
            staging.close()
            lister, quirks, known_quirks, full = self.lister, self.quirks, self.known_quirks, self.full

            staged = StagedWindow(staging.path, source.id, window.start, window.end, run_id, cursor.attempt_id,
                                  received=cursor.received + cursor.quarantined_unparsed)

            merged_again: list[str] = []  # "merged twice: …" when an earlier attempt was rolled back

            def finish(con, counts):
                crashpoint("mid-merge")
                warnings = list(cursor.warnings)
                warnings += merged_again
                if outside and not full:
                    warnings.append(f"{outside} records had datestamps outside the requested window (kept)")
                if counts.quarantined:
                    warnings.append(f"{counts.quarantined} record(s) quarantined (see the quarantine table)")
                new_quirks = (set(lister.quirks) | quirks) - known_quirks
                if new_quirks:
                    ledger.add_quirks(con, source.id, new_quirks)
                    warnings.append(f"server quirk(s) detected and remembered for this source: {', '.join(sorted(new_quirks))}")
                checks = evaluate_checks(
                    counts=counts, complete_list_size=cursor.complete_list_size, pages=cursor.pages,
                    duplicates=counts.duplicates, duplicate_examples=list(counts.duplicate_examples),
                    cursor_closed=cursor.closed,
                    outside_window=0 if full else outside,
                )
                status = _status_for(checks)
                self.book.finish_window(
                    con, source_id=source.id, window_start=window.start, status=status, run_id=run_id, error=None,
                    attempt_id=cursor.attempt_id,
                    complete_list_size=cursor.complete_list_size, received=counts.received,
                    distinct_received=counts.distinct_received, stored=counts.stored, created=counts.created,
                    updated=counts.updated, unchanged=counts.unchanged, deleted=counts.deleted,
                    revived=counts.revived, restored=counts.restored, stale=counts.stale, upserted=counts.upserted,
                    quarantined=counts.quarantined, repaired_chars=cursor.repaired, pages=cursor.pages,
                    duplicates=counts.duplicates, cursor_closed=cursor.closed,
                    check_complete="passed" if checks["complete"].passed else ("unproven" if checks["complete"].severity == "warn" else "failed"),
                    check_duplicates="passed" if checks["no_duplicates"].passed else "failed",
                    check_cursor="passed" if checks["cursor_closed"].passed else "failed",
                    response_date=cursor.response_date, warnings=warnings, retry_not_before=None,
                )
                return counts, warnings, checks, status

            # run_write runs a merge again when its writes ran out of memory: the window's row says why.
            merge = noting_retries(lambda con: finish(con, staged.merge_alone(con)), merged_again)
            what = f"source {source.id}, window {window.key}: merge"
            if self.writer is not None and staged.received <= LARGE_WINDOW_ROWS:
                # With the other sources' windows that end now, in one transaction (harvest/grouped_writes.py).
                counts, warnings, checks, status = self.writer.merge(staged, finish, alone=merge, what=what).result()
            else:
                with MERGE_SLOTS:
                    counts, warnings, checks, status = run_write(self.connect, merge, what=what, log=log)
            crashpoint("after-merge")
            staging.remove()
        except BaseException as exc:
            self._fail(exc)
        finally:
            staging.release()

        return WindowReport(
            source_id=source.id, window=window, status=status, run_id=run_id, attempt_id=cursor.attempt_id,
            from_param=self.from_param, until_param=self.until_param, pages=cursor.pages,
            complete_list_size=cursor.complete_list_size, counts=counts, duplicates=counts.duplicates,
            duplicate_examples=list(counts.duplicate_examples), cursor_closed=cursor.closed, outside_window=outside,
            resumed=self.resumed, restarts=self.restarts, warnings=warnings, seconds=time.monotonic() - self.started,
            checks=checks, repaired=cursor.repaired,
        )

    def release(self) -> None:
        """Give the window up without merging (a caller that will not call `merge()`)."""
        if self.staging is not None:
            self.staging.release()

    def _join_begin(self) -> None:
        """Wait for a ledger row written in the caller's writer thread (raises what it raised)."""
        if self._begin is None:
            return
        begin, self._begin = self._begin, None
        # What the window before learned may not be stored yet (its merge may come after this row).
        self.known_quirks = (begin.result() or set()) | set(self.quirks_known or ())
        self.begun = True

    def _fail(self, exc: BaseException):
        """Record the failure as harvest_window always did, release the window, and raise."""
        try:
            self._join_begin()  # the failure is written after the row it ends, never before
        except Exception as begin_error:  # noqa: BLE001 - the error that ended the window goes on
            log.warning("source %s, window %s: its ledger row was not written: %s",
                        self.source.id, self.window.key, begin_error)
        staging = self.staging
        if staging is None and isinstance(exc, WindowBusyError):
            raise exc.with_context(source_id=self.source.id, window=self.window.key) from None  # never ours: nothing to record
        try:
            if staging is not None:
                staging.close()
            if isinstance(exc, duckdb.OutOfMemoryException):
                exc = HarvestError(
                    f"DuckDB ran out of memory: {str(exc).splitlines()[0]}",
                    hint="raise HARVEST_DUCKDB_MEMORY_LIMIT (default 128MB) and run the window again; "
                    "nothing is lost, the staged pages are kept",
                )
            if not isinstance(exc, stop.HarvestStopped):
                # A stopped window keeps its `running` row and its cursor, as a killed run leaves
                # them: the next run takes it over from the last committed page.
                _record_failure(self.connect, self.source, self.window, exc, self.book)
        finally:
            if staging is not None:
                staging.release()
        if isinstance(exc, HarvestError):
            raise exc.with_context(source_id=self.source.id, window=self.window.key) from None
        raise exc


def _server_clock_behind(window: Window, response_date: str | None) -> DeferredError | None:
    """A server whose clock is before the window's end may not have indexed all of it yet."""
    if not response_date:
        return None
    try:
        server_now = parse_datestamp(response_date)
    except ValueError:
        return None
    if server_now >= window.end:
        return None
    wait = (window.end - server_now).total_seconds() + 60
    return DeferredError(
        f"the server's clock ({response_date}) is before the window's end ({window.end:%Y-%m-%dT%H:%M:%SZ});"
        " its answer may be missing records",
        retry_after_seconds=wait, response_date=response_date,
        hint="the window is deferred; its next run asks the server again",
    )


class _Guards:
    """Pagination guards: stop a traversal that loops or grows beyond belief, naming the guard."""

    def __init__(self, received_before: int, limits: TraversalLimits | None = None, *,
                 first_identifier: str | None = None, quirks=frozenset()):
        self.first_identifier = first_identifier
        self.received = received_before
        self.cursor_warned = False
        self.restart_ends_list = QUIRK_FINAL_TOKEN_RESTARTS_LIST in quirks
        self.learned: set[str] = set()  # quirks this traversal proved, for source_state
        self.list_ended = False  # the last page checked ended the list although it had a token
        # Tokens (length, cycles), pages, records and time: see harvest/budget.py.
        self.budget = TraversalBudget(limits, received_before=received_before)

    def check(self, page, complete_list_size: int | None, pages_done: int) -> list[str]:
        warnings = []
        if page.records:
            first = page.records[0].identifier
            if self.first_identifier is None:
                self.first_identifier = first
            elif first == self.first_identifier:
                return self._restarted(page, complete_list_size)
        self.budget.check(page, complete_list_size, pages_done)
        cursor = page.resumption.cursor
        if cursor is not None and cursor != self.received and not self.cursor_warned:
            warnings.append(f"the server's cursor ({cursor}) differs from the records received before that page ({self.received}); ignored")
            self.cursor_warned = True
        self.received += len(page.records) + len(page.quarantined)
        return warnings

    def _restarted(self, page, complete_list_size: int | None) -> list[str]:
        """A page that starts again with the list's first record.

        After the whole list (as many records as completeListSize), it is the server's way of
        ending the list: the page's records are repeats and are dropped, and the list ends here.
        Before that, records would be missing or repeated: guard 'list-restarted' stops it.
        """
        first = page.records[0].identifier
        traversed = complete_list_size is not None and self.received >= complete_list_size
        if not (traversed or (complete_list_size is None and self.restart_ends_list)):
            of = f" of completeListSize {complete_list_size}" if complete_list_size is not None else ""
            raise ProtocolError(
                "guard 'list-restarted': a later page starts again with the list's first record "
                f"({first}) after {self.received} record(s){of}",
                url=page.url,
                hint="the server's token restarts the list before its end; report it" if complete_list_size is not None
                else "the server's token restarts the list and it gives no completeListSize to prove the list was "
                "complete; report it",
            )
        dropped = len(page.records) + len(page.quarantined)
        page.records, page.quarantined, page.repaired_identifiers = [], [], []
        page.resumption = replace(page.resumption, token=None)
        self.learned.add(QUIRK_FINAL_TOKEN_RESTARTS_LIST)
        self.list_ended = True
        said = (f"after all {self.received} record(s) of completeListSize {complete_list_size}" if traversed
                else f"after {self.received} record(s), as it did before (quirk {QUIRK_FINAL_TOKEN_RESTARTS_LIST})")
        return [
            f"page {page.page_number} started the list again with its first record ({first}) {said}: "
            f"the list ended there; dropped the {dropped} repeated record(s) of that page and did not follow its token"
        ]


def _run_token_loop(
    source: SourceConfig,
    window: Window,
    lister: Lister,
    staging: StagingWindow,
    from_param: str | None,
    until_param: str | None,
    progress: Progress | None,
    described: dict,
    quirks: set[str],
    *,
    early: EarlyFirstPage | None = None,
    on_list_end: OnListEnd | None = None,
) -> None:
    """Fetch pages from the cursor's position until the list ends, committing them in batches.

    `quirks`: what the source's server is known to do; quirks this traversal proves are added.
    `early`: the listing's first page, maybe asked for already (taken only from the start, with
    the same bounds); `on_list_end`: called once the last page has passed its guards.

    Fetching, parsing, guarding and mapping run a page or two ahead in a worker thread
    (`prefetch`); this thread only commits pages, in order, each batch with the token after its
    last page (see `commit` below for how many pages a batch holds).
    """
    cursor = staging.cursor()
    guards = _Guards(cursor.received + cursor.quarantined_unparsed, source.traversal, first_identifier=staging.first_identifier(), quirks=quirks)
    prepared = _prepared_pages(
        source, window, lister,
        # After a stop request the prefetch thread asks for no further page.
        stop.until_stopped((early.take(from_param, until_param, cursor.token) if early is not None else None)
                           or lister.pages(from_param=from_param, until_param=until_param, resume_token=cursor.token)),
        guards=guards, pages_before=cursor.pages, on_list_end=on_list_end,
        size=cursor.complete_list_size, seconds_granularity="hh" in (described.get("granularity") or ""),
    )
    pages_done, received, size = cursor.pages, cursor.received, cursor.complete_list_size
    commit_rows = staging_commit_rows()
    pending_since = None

    def commit() -> None:
        nonlocal pages_done, received, pending_since
        rows_now = staging.pending_rows
        committed = staging.commit_pages()
        pending_since = None
        if not committed:
            return
        pages_done, received = pages_done + committed, received + rows_now
        if progress is not None:
            progress({
                "source_id": source.id, "window": window.key, "pages": pages_done,
                "received": received, "complete_list_size": size,
            })

    pages = prefetch(prepared)
    try:
        for page, rows, quarantined, warnings in pages:
            crashpoint("after-fetch")
            staging.stage_page(
                rows, next_token=page.next_token, complete_list_size=page.resumption.complete_list_size,
                response_date=page.response_date, warnings=warnings, quarantined=quarantined, repaired=page.repaired,
            )
            size = size if size is not None else page.resumption.complete_list_size
            pending_since = pending_since or time.monotonic()
            # Several pages per commit (a commit costs as much as a few hundred rows), but never more
            # than `commit_rows` rows or STAGING_COMMIT_SECONDS of them: the next page is awaited
            # until the oldest staged one is that old, and if it has not come, the batch is
            # committed while the server keeps us waiting.
            if (commit_rows <= 1 or staging.pending_rows >= commit_rows
                    or not pages.next_ready(timeout=pending_since + STAGING_COMMIT_SECONDS - time.monotonic())):
                commit()
            if page.next_token is not None:
                stop.check(source_id=source.id, window=window.key, pages=pages_done)
    except Exception:
        # The pages before the error are good: the cursor then points at the failing one. (A
        # failed commit has emptied the batch already, so this one writes nothing.)
        try:
            commit()
        except Exception as commit_error:  # never hide the error that ended the loop
            log.warning("source %s, window %s: could not commit the pages before the error: %s",
                        source.id, window.key, commit_error)
        raise
    commit()
    if not staging.cursor().closed:
        stop.check(source_id=source.id, window=window.key, pages=pages_done)
    quirks |= guards.learned


def _prepared_pages(source, window, lister, pages, *, guards, pages_before, size, seconds_granularity, on_list_end=None):
    """Each page checked by the guards, its unreadable records fetched again, mapped to rows.

    Once a page has passed its guards (and its unreadable records were asked for again), the
    next page is requested while this one is mapped (`FetchAhead`)."""
    with FetchAhead(pages) as ahead:
        yield from _prepared_pages_from(source, window, lister, ahead, guards=guards, pages_before=pages_before,
                                        size=size, seconds_granularity=seconds_granularity, on_list_end=on_list_end)


def _prepared_pages_from(source, window, lister, ahead, *, guards, pages_before, size, seconds_granularity, on_list_end):
    while (page := ahead.next()) is not None:
        page.page_number += pages_before
        if size is None:
            size = page.resumption.complete_list_size
        warnings = [*page.warnings, *guards.check(page, size, page.page_number)]
        if page.quarantined:
            warnings += _fetch_unreadable_again(lister, page)
        warnings += lister.drain_warnings()
        if seconds_granularity:
            day_only = sum(1 for r in page.records if len(r.datestamp) == 10)
            if day_only:
                warnings.append(f"page {page.page_number}: {day_only} datestamp(s) have day granularity although Identify says seconds")
        capped_warnings, capped = cap_future_datestamps(page)
        warnings += capped_warnings
        if page.next_token is not None and not guards.list_ended:
            ahead.request_next()
        elif on_list_end is not None:
            on_list_end()  # nothing more to ask for in this window: the next one may begin
        # Records from the overlap were asked for: only those outside what we asked count as outside.
        asked_from = window.start - timedelta(seconds=source.overlap_seconds)
        rows, quarantined = page_rows(page, metadata_prefix=record_format_label(source), window_start=asked_from, window_end=window.end)
        # The rows hold what the writer needs; the records (and the page's lxml tree they point
        # into, ~10x the page's bytes) are let go before the page waits in the prefetch queue.
        page.records = []
        yield page, rows, quarantined + capped, warnings
        if guards.list_ended:
            return  # the guards ended the list on a page that still carried a token


def request_bounds(source: SourceConfig, window: Window, lister: Lister) -> tuple[str | None, str | None]:
    """The from/until a window's listing asks for: the overlap re-asks for a little before the
    window, for servers whose indexes lag."""
    return lister.bounds(window.start - timedelta(seconds=source.overlap_seconds), window.end)


def _fetch_unreadable_again(lister: Lister, page) -> list[str]:
    """Records unreadable inside a list page are asked for once more, alone (GetRecord, GetRecordById).

    A record that then parses joins the page (its broken copy stays in quarantine, kind
    'recovered', for the audit); one that still fails stays quarantined as unreadable.
    """
    notes = []
    still_broken = []
    for q in page.quarantined:
        if not q.identifier:
            still_broken.append(q)
            continue
        try:
            page.records.append(lister.get_record(q.identifier))
        except HarvestError as exc:
            still_broken.append(q)
            notes.append(f"record {q.identifier}: unreadable in the list and again alone ({exc.message})")
            continue
        still_broken.append(replace(q, kind="recovered"))
        notes.append(f"record {q.identifier}: unreadable in the list, fetched again alone with {lister.record_verb}")
    page.quarantined = still_broken
    return notes


def _record_failure(connect: Connect, source: SourceConfig, window: Window, exc: BaseException, book=ledger) -> None:
    """Mark the window failed (or deferred) in the ledger; never mask the original error.

    A catalogue that cannot take the mark (locked, full disk) is logged and the original error
    goes on: the ledger then still says `running`, and the next run of the window takes over.
    """
    text = str(exc) if isinstance(exc, HarvestError) else f"{type(exc).__name__}: {exc}"
    try:
        with connect() as con:
            if isinstance(exc, DeferredError):
                book.defer_window(
                    con, source_id=source.id, window=window, error=text, response_date=exc.response_date,
                    retry_not_before=datetime.now(timezone.utc) + timedelta(seconds=exc.retry_after_seconds),
                )
            else:
                book.fail_window(con, source_id=source.id, window=window, error=text)
    except (HarvestError, duckdb.Error, OSError) as ledger_error:
        log.warning(
            "source %s, window %s: could not mark the window %s in the ledger (%s: %s); "
            "the error that ended the run follows. The ledger still says running until the window runs again",
            source.id, window.key, "deferred" if isinstance(exc, DeferredError) else "failed",
            type(ledger_error).__name__, ledger_error,
        )
