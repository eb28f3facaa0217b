"""harvest_windows (harvest/sequence.py): consecutive windows of one source, window N merged while
window N+1 is fetched, each window still its own traversal, cursor, ledger row and verdict.

Real demo provider over loopback, real DuckDB files; the crash test kills a child process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from datetime import timedelta
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

import pytest

from harvest_pipeline.harvest import Window, harvest_partition, harvest_windows, stop
from harvest_pipeline.harvest.oai_lister import OaiLister
from harvest_pipeline.sources.registry import HttpSettings
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.session import CatalogueSession
from harvest_pipeline.store.staging import open_staging_files
from harvest_pipeline.store.window_parts import window_state
from harvest_pipeline.demo.process import start_demo_provider
from harvest_pipeline_tests.conftest import day_window, demo_options, demo_source, records_table, window_stats

pytestmark = pytest.mark.integration
CHILD = Path(__file__).with_name("sequence_child.py")
WAIT = 20.0  # seconds a window's callback waits to see the next window fetched (never reached when correct)


@pytest.fixture
def demo40():
    """A provider of the test's own with 40 records a day: two ListRecords pages a day."""
    with start_demo_provider(**demo_options(records_per_day=40)) as provider:
        yield provider


class WatchedLister(OaiLister):
    """The real OAI-PMH lister, counting its listings (ListRecords walks) and the requests it has
    in flight at once (what the server sees: one at a time per source), and noting when each
    window's first request was sent (by its `from`)."""

    def __init__(self, source, state_dir):
        super().__init__(source, state_dir=state_dir)
        self._lock = threading.Lock()
        self.in_flight = self.most_in_flight = self.traversals = 0
        self.first_requests: dict[str, threading.Event] = {}  # from param -> sent
        transport = self.client.transport
        send = transport.request

        def request(*args, **kw):
            params = dict(parse_qsl(urlsplit(args[1]).query)) if len(args) > 1 else {}
            with self._lock:
                self.in_flight += 1
                self.most_in_flight = max(self.most_in_flight, self.in_flight)
                if params.get("verb") == "ListRecords" and "from" in params:
                    self.first_requests.setdefault(params["from"], threading.Event()).set()
            try:
                return send(*args, **kw)
            finally:
                with self._lock:
                    self.in_flight -= 1

        transport.request = request

    def first_request_sent(self, from_param: str) -> threading.Event:
        with self._lock:
            return self.first_requests.setdefault(from_param, threading.Event())

    def pages(self, **kw):
        with self._lock:
            self.traversals += 1
        yield from super().pages(**kw)


def content(db_path) -> list[tuple]:
    """What a split harvest must store the same as a whole one (the window columns name the sub-window)."""
    with connect(db_path) as con:
        return con.execute("SELECT identifier, datestamp, deleted, content_hash FROM records ORDER BY identifier").fetchall()


def ledger_rows(db_path, windows: list[Window]) -> dict:
    with connect(db_path) as con:
        return {w.key: ledger.get_window(con, "demo", w.start.replace(tzinfo=None)) for w in windows}


def test_each_merge_overlaps_the_next_windows_fetch_merges_stay_in_order_and_requests_never_overlap(demo40, db_path):
    demo = demo40
    demo.set_options(slow_ms=150)
    source = demo_source(demo)
    windows = [day_window(n) for n in (5, 4, 3, 2)]
    lister = WatchedLister(source, db_path.parent / "hosts")
    fetched = {w.key: threading.Event() for w in windows}
    done: list[str] = []
    saw_next_fetched: dict[str, bool] = {}
    requests_before = demo.faults()["requests"]

    def progress(event: dict) -> None:
        fetched[event["window"]].set()

    def window_done(outcome) -> None:
        done.append(outcome.window.key)
        n = windows.index(outcome.window)
        if n + 1 < len(windows):
            # Window N is merged: window N+1 must be on the wire already (it has committed a page),
            # not waiting for this merge and this callback.
            saw_next_fetched[outcome.window.key] = fetched[windows[n + 1].key].wait(WAIT)

    outcomes = harvest_windows(source, windows, run_id="seq", db_path=db_path, lister=lister,
                               progress=progress, on_window_done=window_done)

    assert [o.window for o in outcomes] == windows
    assert all(o.ok for o in outcomes), [str(o.error) for o in outcomes if not o.ok]
    assert done == [w.key for w in windows]  # callbacks in window order
    assert saw_next_fetched == {w.key: True for w in windows[:-1]}  # the overlap happened
    assert lister.most_in_flight == 1 and lister.traversals == len(windows)  # one request at a time, one listing a window
    rows = ledger_rows(db_path, windows)
    for w, outcome in zip(windows, outcomes):
        expected = window_stats(demo, w)["total"]
        assert outcome.report.status == rows[w.key].status == ledger.VERIFIED
        assert outcome.report.counts.received == rows[w.key].received == expected
        assert rows[w.key].pages == 2 and rows[w.key].run_id == "seq"
    # Merged in window order (the ledger's finish times).
    finished = [rows[w.key].finished_at for w in windows]
    assert finished == sorted(finished)
    # One Identify for the whole sequence, then exactly the ListRecords pages.
    assert demo.faults()["requests"] - requests_before == 1 + 2 * len(windows)
    assert open_staging_files(db_path) == []


def test_the_next_windows_first_request_goes_out_while_the_last_page_before_it_is_written(demo40, db_path, monkeypatch):
    """Once a window's list has ended, the next window's first page is asked for at once, not after
    that last page was mapped and committed (with a hundred sources answering together that took
    0.7-1.8 s per source). Still one request at a time, one listing per window, nothing fetched twice."""
    from harvest_pipeline.harvest import window as window_module

    demo = demo40
    source = demo_source(demo)
    windows = [day_window(n) for n in (4, 3, 2)]
    lister = WatchedLister(source, db_path.parent / "hosts")
    lister.describe()
    next_from = {windows[n].key: lister.bounds(windows[n + 1].start, windows[n + 1].end)[0] for n in range(len(windows) - 1)}
    seen_while_writing: dict[str, bool] = {}
    real_page_rows = window_module.page_rows

    def page_rows(page, **kw):
        key = next((w.key for w in windows if w.end == kw["window_end"]), None)
        if page.next_token is None and key in next_from:  # the window's last page, before it is mapped
            seen_while_writing[key] = lister.first_request_sent(next_from[key]).wait(WAIT)
        return real_page_rows(page, **kw)

    monkeypatch.setattr(window_module, "page_rows", page_rows)
    requests_before = demo.faults()["requests"]
    outcomes = harvest_windows(source, windows, run_id="early", db_path=db_path, lister=lister)

    assert all(o.ok and o.report.status == ledger.VERIFIED for o in outcomes), [str(o.error) for o in outcomes]
    assert seen_while_writing == {w.key: True for w in windows[:-1]}
    assert lister.most_in_flight == 1 and lister.traversals == len(windows)
    assert demo.faults()["requests"] - requests_before == 2 * len(windows)  # every page once (Identify was asked above)
    rows = ledger_rows(db_path, windows)
    for w, outcome in zip(windows, outcomes):
        assert outcome.report.counts.received == rows[w.key].received == window_stats(demo, w)["total"]
    assert open_staging_files(db_path) == []


def test_a_window_resumed_from_its_cursor_is_not_asked_for_early(demo40, db_path):
    """A window with a cursor of its own (a run died in it after its first page) goes on from that
    cursor: its first page is not asked for again while the window before ends."""
    from harvest_pipeline.harvest.rows import page_rows
    from harvest_pipeline.harvest.window import _request_key, request_bounds
    from harvest_pipeline.store.staging import StagingWindow, staging_path

    demo = demo40
    source = demo_source(demo)
    windows = [day_window(3), day_window(2)]
    lister = WatchedLister(source, db_path.parent / "hosts")
    lister.describe()
    bounds = request_bounds(source, windows[1], lister)
    first = next(lister.pages(from_param=bounds[0], until_param=bounds[1], resume_token=None))
    assert first.next_token  # the window has a second page
    with StagingWindow(staging_path(db_path, source.id, windows[1].start)) as staging:
        staging.start_attempt("died", _request_key(source, *bounds))
        rows, quarantined = page_rows(first, metadata_prefix="oai_dc", window_start=windows[1].start, window_end=windows[1].end)
        staging.write_page(rows, next_token=first.next_token, complete_list_size=first.resumption.complete_list_size,
                           response_date=first.response_date, warnings=[], quarantined=quarantined)
    requests_before, listings_before = demo.faults()["requests"], lister.traversals
    outcomes = harvest_windows(source, windows, db_path=db_path, lister=lister)
    assert all(o.ok and o.report.status == ledger.VERIFIED for o in outcomes), [str(o.error) for o in outcomes]
    assert outcomes[1].report.counts.received == window_stats(demo, windows[1])["total"]
    # Window 3: two pages; window 2: its second page only, from the cursor.
    assert demo.faults()["requests"] - requests_before == 3
    assert lister.traversals - listings_before == 2


def test_a_failing_window_in_the_middle_is_recorded_failed_and_the_next_windows_still_run(demo40, db_path):
    demo = demo40
    # Requests: 1 Identify, then two pages a window; the 5th request (window 2's second page) is
    # refused with HTTP 429 and no retry: that window fails, nothing else does.
    demo.set_options(fail_every=5, fail_status=429, retry_after="")
    source = demo_source(demo, http=HttpSettings(max_retries=0))
    windows = [day_window(n) for n in (4, 3, 2)]
    done = []

    outcomes = harvest_windows(source, windows, db_path=db_path, on_window_done=lambda o: done.append(o))

    assert [o.ok for o in outcomes] == [True, False, True]
    assert [o.window for o in done] == windows
    failed = outcomes[1].error
    assert "429" in str(failed) and failed.window == windows[1].key and failed.source_id == "demo"
    rows = ledger_rows(db_path, windows)
    assert [rows[w.key].status for w in windows] == [ledger.VERIFIED, ledger.FAILED, ledger.VERIFIED]
    assert "429" in rows[windows[1].key].error
    assert outcomes[2].report.counts.received == window_stats(demo, windows[2])["total"]
    # The failed window kept its committed first page: its next run resumes from there.
    [left] = open_staging_files(db_path)
    demo.set_options(fail_every=0)
    [again] = harvest_windows(source, [windows[1]], db_path=db_path)
    assert again.ok and again.report.resumed and again.report.status == ledger.VERIFIED
    assert not left.exists()


def test_a_first_request_refused_while_the_window_before_ends_fails_its_own_window_once(demo40, db_path):
    """The next window's first request, sent early, is refused (HTTP 429, no retry): that is the next
    window's failure, as if it had sent it itself, and it is not sent a second time."""
    demo = demo40
    # Requests: 1 Identify, two pages a window; the 4th is window 2's first page, asked for early.
    demo.set_options(fail_every=4, fail_status=429, retry_after="")
    source = demo_source(demo, http=HttpSettings(max_retries=0))
    windows = [day_window(n) for n in (4, 3, 2)]
    requests_before = demo.faults()["requests"]

    outcomes = harvest_windows(source, windows, db_path=db_path)

    assert [o.ok for o in outcomes] == [True, False, True]
    failed = outcomes[1].error
    assert "429" in str(failed) and failed.window == windows[1].key and failed.source_id == "demo"
    assert ledger_rows(db_path, windows)[windows[1].key].status == ledger.FAILED
    # Identify, window 4's two pages, window 3's refused first page, window 2's two pages: the
    # refused request was not sent again (that would have been the 5th, and window 2's second the 8th).
    assert demo.faults()["requests"] - requests_before == 6
    assert outcomes[2].report.counts.received == window_stats(demo, windows[2])["total"]


def test_a_stop_request_stops_the_window_at_a_page_boundary_merges_the_one_before_and_starts_no_later_one(demo, db_path, monkeypatch):
    demo.set_options(slow_ms=50)  # 60 records a day, 25 a page: three pages a day
    monkeypatch.setenv("HARVEST_STAGING_COMMIT_ROWS", "1")  # a commit (and a progress event) per page
    source = demo_source(demo)
    windows = [day_window(n) for n in (5, 4, 3, 2)]

    def progress(event: dict) -> None:
        if event["window"] == windows[1].key:
            stop.request(signal.SIGTERM)

    try:
        outcomes = harvest_windows(source, windows, db_path=db_path, progress=progress)
    finally:
        stop.clear()

    assert outcomes[0].ok and outcomes[0].report.status == ledger.VERIFIED
    assert isinstance(outcomes[1].error, stop.HarvestStopped) and outcomes[1].started
    assert [(o.started, isinstance(o.error, stop.HarvestStopped)) for o in outcomes[2:]] == [(False, True), (False, True)]
    rows = ledger_rows(db_path, windows)
    assert rows[windows[1].key].status == ledger.RUNNING  # kept with its cursor, as a killed run leaves it
    assert rows[windows[2].key] is None and rows[windows[3].key] is None

    requests_before = demo.faults()["requests"]
    rerun = harvest_windows(source, windows[1:], db_path=db_path)
    assert all(o.ok and o.report.status == ledger.VERIFIED for o in rerun)
    assert rerun[0].report.resumed  # from its last committed page, not from the start
    assert demo.faults()["requests"] - requests_before < 1 + 3 * 3


def _child(url, db, first: Window, n: int, crashpoint: str):
    env = {**os.environ, "HARVEST_CRASHPOINT": crashpoint, "HARVEST_STAGING_COMMIT_ROWS": "1"}
    return subprocess.run(
        [sys.executable, str(CHILD), url, str(db), first.start.isoformat(), str(n)],
        env=env, capture_output=True, text=True, timeout=120,
    )


def test_a_crash_in_a_merge_while_the_next_window_is_fetched_loses_nothing_and_fetches_no_page_again(demo40, db_path, tmp_path):
    demo = demo40
    demo.set_options(slow_ms=100)
    source = demo_source(demo)
    windows = [day_window(n) for n in (4, 3, 2)]
    clean = tmp_path / "clean" / "h.duckdb"
    for w in windows:
        harvest_partition(source, w, db_path=clean)

    requests_before = demo.faults()["requests"]
    crashed = _child(demo.url, db_path, windows[0], len(windows), "mid-merge:1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    first_run_requests = demo.faults()["requests"] - requests_before
    rows = ledger_rows(db_path, windows)
    assert rows[windows[0].key].status == ledger.RUNNING  # its merge never committed
    staged = {p.stem for p in open_staging_files(db_path)}
    assert windows[0].start.strftime("%Y%m%dT%H%M%S") in staged

    requests_before = demo.faults()["requests"]
    outcomes = harvest_windows(source, windows, db_path=db_path)
    assert all(o.ok and o.report.status == ledger.VERIFIED for o in outcomes), [str(o.error) for o in outcomes]
    # Window 1's list was complete in its staging file: merged without asking the server again.
    assert outcomes[0].report.resumed and outcomes[0].report.pages == 2
    second_run_requests = demo.faults()["requests"] - requests_before
    # The second run asked for Identify and at most the pages of windows 2 and 3 (window 2's pages
    # fetched but not yet committed when the process died are fetched again), none of window 1.
    assert first_run_requests >= 1 + 2
    assert second_run_requests <= 1 + 2 * (len(windows) - 1)
    assert records_table(db_path) == records_table(clean)
    assert open_staging_files(db_path) == []


def test_windows_that_split_inside_a_sequence_verify_with_the_providers_records(demo, db_path, tmp_path):
    # 60 records a day, 25 a page: a day is 3 pages; a two-day window's 5 pages outlive the tokens.
    first = day_window(6)
    two_days = Window(first.end, first.end + timedelta(days=2), "two-days")
    last = Window(two_days.end, two_days.end + timedelta(days=1), "last")
    windows = [first, two_days, last]
    clean = tmp_path / "clean" / "h.duckdb"
    source = demo_source(demo, http=HttpSettings(max_retries=1, backoff_base_seconds=0.01, backoff_max_seconds=0.02))
    for w in windows:
        harvest_partition(source, w, db_path=clean)

    demo.set_options(token_expires_after_pages=3)
    done = []
    outcomes = harvest_windows(source, windows, db_path=db_path, on_window_done=lambda o: done.append(o.window.key))
    assert all(o.ok and o.report.status == ledger.VERIFIED for o in outcomes), [str(o.error) for o in outcomes]
    assert done == [w.key for w in windows]
    assert any("split into 2 sub-windows" in w for w in outcomes[1].report.warnings)
    rows = ledger_rows(db_path, windows)
    with connect(db_path) as con:
        assert [window_state(con, "demo", w.start).split_into for w in windows] == [None, 2, None]
    assert [rows[w.key].finished_at for w in windows] == sorted(rows[w.key].finished_at for w in windows)
    assert content(db_path) == content(clean)

    # Run again: the split window goes straight to its sub-windows, between the others.
    again = harvest_windows(source, windows, db_path=db_path)
    assert all(o.ok and o.report.status == ledger.VERIFIED for o in again)
    assert content(db_path) == content(clean)


def test_the_catalogue_session_opens_once_for_writes_close_together_and_closes_when_idle(tmp_path):
    db = tmp_path / "h.duckdb"
    reuse = CatalogueSession(db, linger_seconds=0.2, max_hold_seconds=5)
    with reuse.connection() as a:
        with reuse.connection() as b:  # the same thread again while it holds it: the same open
            b.execute("CREATE TABLE t (x INTEGER)")
        a.execute("INSERT INTO t VALUES (1)")
    with reuse.connection() as c:
        assert c.execute("SELECT count(*) FROM t").fetchone()[0] == 1
    assert reuse.opens == 1
    # Idle: closed, so another process can open the file.
    deadline = threading.Event()
    deadline.wait(0.6)
    code = "import duckdb, sys; duckdb.connect(sys.argv[1]).execute('SELECT count(*) FROM t').fetchone()"
    assert subprocess.run([sys.executable, "-c", code, str(db)], timeout=60).returncode == 0
    with reuse.connection() as d:
        d.execute("SELECT 1")
    assert reuse.opens == 2
    reuse.close()


def test_a_failure_is_written_after_a_late_ledger_row_never_overwritten_by_it(demo40, db_path):
    """The ledger row written in the writer thread (harvest_windows' merge thread) may come late;
    a traversal that fails first waits for it, so the window ends `failed`, not `running`."""
    from concurrent.futures import ThreadPoolExecutor

    from harvest_pipeline.errors import HTTPStatusError
    from harvest_pipeline.harvest.window import WindowHarvest

    source = demo_source(demo40, http=HttpSettings(max_retries=0))
    window = day_window(3)
    lister = OaiLister(source, state_dir=db_path.parent / "hosts")
    lister.describe()  # Identify, asked for the window before
    demo40.set_options(fail_every=1, fail_status=429, retry_after="")  # from here every request is refused
    writer = ThreadPoolExecutor(max_workers=1)
    late = threading.Event()
    writer.submit(late.wait, 2.0)  # the writer is busy (a merge) when the window begins
    harvest = WindowHarvest(source, window, db_path=db_path, lister=lister, quirks_known=set(), submit_begin=writer.submit)
    with pytest.raises(HTTPStatusError):
        harvest.traverse()
    writer.shutdown(wait=True)
    row = ledger_rows(db_path, [window])[window.key]
    assert row.status == ledger.FAILED and "429" in row.error



OPEN_READ_ONLY = """
import sys, time, duckdb
deadline = time.monotonic() + 3
while True:
    try:
        con = duckdb.connect(sys.argv[1], read_only=True)
        print(con.execute("SELECT count(*) FROM harvest_windows").fetchone()[0])
        break
    except duckdb.Error:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.05)
"""


def test_another_process_opens_the_catalogue_while_the_sequence_fetches_between_merges(demo40, db_path):
    """The run does not hold DuckDB's file lock while it waits on the server: the sensor, other
    runs and the CLI open the catalogue between its merges."""
    demo40.set_options(slow_ms=1000)
    source = demo_source(demo40)
    windows = [day_window(n) for n in (3, 2)]
    opened = []

    def progress(event: dict) -> None:
        if event["window"] == windows[1].key and not opened:
            # Window 2's first commit: window 1's merge and window 2's ledger row were written
            # at least a page (1 s) ago.
            child = subprocess.run([sys.executable, "-c", OPEN_READ_ONLY, str(db_path)],
                                   capture_output=True, text=True, timeout=60)
            opened.append((child.returncode, child.stdout.strip(), child.stderr[-300:]))

    outcomes = harvest_windows(source, windows, db_path=db_path, progress=progress)
    assert all(o.ok for o in outcomes)
    assert opened == [(0, "2", "")]


def test_sources_harvested_in_threads_of_one_process_merge_their_windows_in_groups(demo40, db_path, monkeypatch):
    """One process shares one DuckDB instance per file: the windows of sources harvested side by
    side in threads (a batch run) that end together are merged as one group, in one transaction of
    the process's catalogue writer, and each keeps its own rows, ledger row and verdict."""
    from harvest_pipeline.harvest import grouped_writes

    windows = [day_window(n) for n in (6, 5, 4, 3, 2)]
    outcomes: dict[str, list] = {}
    groups: list[list[str]] = []
    real_merge = grouped_writes.merge_staged_windows

    def slow_merge(con, staged):  # long enough for the other sources' windows to end meanwhile
        groups.append([w.source_id for w in staged])
        time.sleep(0.3)
        return real_merge(con, staged)

    monkeypatch.setattr(grouped_writes, "merge_staged_windows", slow_merge)

    def harvest(source_id: str) -> None:
        outcomes[source_id] = harvest_windows(demo_source(demo40, id=source_id), windows, db_path=db_path)

    threads = [threading.Thread(target=harvest, args=(source_id,)) for source_id in ("a", "b", "c")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    errors = {sid: [str(o.error) for o in outs if not o.ok] for sid, outs in outcomes.items()}
    assert errors == {"a": [], "b": [], "c": []}
    with connect(db_path) as con:
        counts = dict(con.execute("SELECT source_id, count(*) FROM records GROUP BY 1").fetchall())
        verified = dict(con.execute(
            "SELECT source_id, count(*) FROM harvest_windows WHERE status = 'verified' GROUP BY 1").fetchall())
    total = sum(window_stats(demo40, w)["total"] for w in windows)
    assert counts == {"a": total, "b": total, "c": total}
    assert verified == {"a": 5, "b": 5, "c": 5}
    # (a window that ends while no other write waits is written on its own, without a group)
    assert max(len(g) for g in groups) > 1  # windows of different sources merged together
    assert all(len(set(g)) == len(g) for g in groups)  # never two windows of one source


OPEN_THROUGH_THE_STORE = """
import sys, time
from harvest_pipeline.store.connection import connect
t = time.monotonic()
with connect(sys.argv[1], read_only=True, wait_seconds=float(sys.argv[2])) as con:
    print(con.execute("SELECT count(*) FROM t").fetchone()[0], round(time.monotonic() - t, 2))
"""


def test_a_busy_session_keeps_the_file_until_another_process_asks_for_it_then_lets_it_go(tmp_path):
    """A batch run's writes come back to back: its session keeps the catalogue open (no checkpoint
    per close) until a process waiting for the file says so, then lets it in."""
    db = tmp_path / "h.duckdb"
    session = CatalogueSession(db, linger_seconds=0.5, max_hold_seconds=60)
    with session.connection() as con:
        con.execute("CREATE TABLE t (x INTEGER)")
    stop = threading.Event()

    def writer():  # never idle for the linger time
        while not stop.is_set():
            with session.connection() as con:
                con.execute("INSERT INTO t VALUES (1)")
            time.sleep(0.05)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        time.sleep(1.5)
        assert session.opens == 1  # 1.5 s of writes, nobody asked: one open, no close
        # A process that does not say it waits (plain DuckDB retries) does not get in ...
        plain = subprocess.run([sys.executable, "-c", OPEN_READ_ONLY.replace("harvest_windows", "t"), str(db)],
                               capture_output=True, text=True, timeout=60)
        assert plain.returncode != 0 and "lock" in plain.stderr.lower()
        assert session.opens == 1
        # ... one that opens through the store does, within a few seconds.
        asking = subprocess.run([sys.executable, "-c", OPEN_THROUGH_THE_STORE, str(db), "10"],
                                capture_output=True, text=True, timeout=60)
        assert asking.returncode == 0, asking.stderr[-500:]
        assert int(asking.stdout.split()[0]) > 0 and float(asking.stdout.split()[1]) < 5
    finally:
        stop.set()
        thread.join()
    assert session.opens == 2  # let go once, opened again for the next write
    session.close()


def test_the_first_windows_ledger_row_does_not_hold_back_its_first_request(demo40, db_path):
    """A batch run starts a hundred sources at once: with the stored quirks read up front, even the
    first window's ledger row is written in the merge thread while its first page is fetched."""
    from contextlib import contextmanager

    source = demo_source(demo40)
    lister = WatchedLister(source, state_dir=db_path.parent / "hosts")
    session = CatalogueSession(db_path)
    uses: list[int] = []
    traversals_when_the_row_was_written: list[int] = []

    @contextmanager
    def connect():
        with session.connection() as con:
            uses.append(1)
            if len(uses) == 2:  # the one read of the windows' states, then the first ledger row
                time.sleep(1.0)  # a busy catalogue
                traversals_when_the_row_was_written.append(lister.traversals)
            yield con

    windows = [day_window(3), day_window(2)]
    outcomes = harvest_windows(source, windows, db_path=db_path, connect=connect, lister=lister)
    session.close()
    assert all(o.ok and o.report.status == ledger.VERIFIED for o in outcomes)
    # The first window's list was being fetched (or already fetched, the second's begun: it is
    # asked for as soon as the first list ends), not waiting for the row.
    assert len(traversals_when_the_row_was_written) == 1 and traversals_when_the_row_was_written[0] >= 1


def test_threads_write_the_catalogue_side_by_side_each_in_its_own_transaction(tmp_path):
    """The sources of a batch run merge at the same time: each use is a cursor of the one open
    file, its own transaction, and the file is closed only when every cursor is back."""
    db = tmp_path / "h.duckdb"
    session = CatalogueSession(db, linger_seconds=0.2, max_hold_seconds=60)
    with session.connection() as con:
        con.execute("CREATE TABLE t (source VARCHAR, x INTEGER)")
    a_inside, b_done = threading.Event(), threading.Event()
    seen_by_b: list[int] = []

    def a():
        with session.connection() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute("INSERT INTO t VALUES ('a', 1)")
            a_inside.set()
            assert b_done.wait(10), "b had to wait for a's transaction"
            con.execute("COMMIT")

    def b():
        assert a_inside.wait(10)
        with session.connection() as con:
            con.execute("BEGIN TRANSACTION")
            con.execute("INSERT INTO t VALUES ('b', 2)")
            seen_by_b.append(con.execute("SELECT count(*) FROM t WHERE source = 'a'").fetchone()[0])
            con.execute("COMMIT")
        b_done.set()

    errors: list[BaseException] = []

    def guarded(fn):
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(f,)) for f in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors, errors
    assert seen_by_b == [0]  # a's transaction was still open: its own
    with session.connection() as con:
        assert con.execute("SELECT source, x FROM t ORDER BY 1").fetchall() == [("a", 1), ("b", 2)]
    assert session.opens == 1
    session.close()
    code = "import duckdb, sys; print(duckdb.connect(sys.argv[1]).execute('SELECT count(*) FROM t').fetchone()[0])"
    assert subprocess.run([sys.executable, "-c", code, str(db)], capture_output=True, text=True,
                          timeout=60).stdout.strip() == "2"  # closed: another process opens it
