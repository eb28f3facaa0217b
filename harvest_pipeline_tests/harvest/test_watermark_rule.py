"""The sensor's planning rule alone: watermark over passing windows, launches, retry backoff."""

from datetime import datetime, timedelta

from harvest_pipeline.harvest.watermark import plan_tick, retry_delay
from harvest_pipeline.store import ledger
from harvest_pipeline.store.ledger import WindowRow

D0 = datetime(2026, 11, 1)
WINDOWS = [(f"2026-11-0{i + 1}", D0 + timedelta(days=i), D0 + timedelta(days=i + 1)) for i in range(5)]
NOW = datetime(2026, 11, 7, 12)


def _row(i, status, attempts=1, finished=None):
    key, start, end = WINDOWS[i]
    return WindowRow(
        source_id="s", window_start=start, window_end=end, partition_key=key, status=status, run_id="r",
        attempts=attempts, complete_list_size=None, received=None, stored=None, upserted=None, deleted=None,
        pages=None, duplicates=None, check_complete=None, check_duplicates=None, check_cursor=None,
        warnings=None, error=None, started_at=finished or NOW - timedelta(days=1), finished_at=finished or NOW - timedelta(days=1),
    )


def test_fresh_source_launches_every_closed_window_and_has_no_watermark():
    wm, launch = plan_tick(windows=WINDOWS, ledger_rows={}, watermark=None, in_flight=set(), now=NOW, limit=10)
    assert wm is None
    assert launch == [k for k, _, _ in WINDOWS]


def test_watermark_stops_at_first_failing_window_and_failures_are_retried():
    rows = {
        WINDOWS[0][1]: _row(0, ledger.VERIFIED),
        WINDOWS[1][1]: _row(1, ledger.UNPROVEN),
        WINDOWS[2][1]: _row(2, ledger.INCOMPLETE),
        WINDOWS[3][1]: _row(3, ledger.VERIFIED),
    }
    wm, launch = plan_tick(windows=WINDOWS, ledger_rows=rows, watermark=None, in_flight=set(), now=NOW, limit=10)
    assert wm == WINDOWS[2][1]  # end of window 1 = start of the incomplete window 2
    assert launch == [WINDOWS[2][0], WINDOWS[4][0]]


def test_recent_failure_backs_off_and_in_flight_is_not_relaunched():
    rows = {WINDOWS[0][1]: _row(0, ledger.FAILED, attempts=3, finished=NOW - timedelta(minutes=2))}
    wm, launch = plan_tick(
        windows=WINDOWS, ledger_rows=rows, watermark=None, in_flight={WINDOWS[1][0]}, now=NOW, limit=10
    )
    assert wm is None
    assert launch == [WINDOWS[2][0], WINDOWS[3][0], WINDOWS[4][0]]
    assert retry_delay(3) == timedelta(minutes=4)


def test_watermark_never_moves_back_and_limit_caps_launches():
    wm, launch = plan_tick(windows=WINDOWS, ledger_rows={}, watermark=WINDOWS[3][1], in_flight=set(), now=NOW, limit=1)
    assert wm == WINDOWS[3][1]
    assert launch == [WINDOWS[3][0]]


def test_deferred_window_waits_for_the_servers_time_then_is_relaunched():
    row = _row(0, ledger.DEFERRED, attempts=1, finished=NOW - timedelta(minutes=1))
    row.retry_not_before = NOW + timedelta(minutes=30)
    wm, launch = plan_tick(windows=WINDOWS[:1], ledger_rows={WINDOWS[0][1]: row}, watermark=None, in_flight=set(), now=NOW, limit=10)
    assert wm is None and launch == []
    wm, launch = plan_tick(
        windows=WINDOWS[:1], ledger_rows={WINDOWS[0][1]: row}, watermark=None, in_flight=set(),
        now=NOW + timedelta(minutes=31), limit=10,
    )
    assert launch == [WINDOWS[0][0]]
