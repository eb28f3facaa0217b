"""Windows that split themselves (harvest/split.py), over loopback against the demo provider.

A window the server cannot serve whole (tokens that expire after a few pages, HTTP 504 on large
ranges) failed before; `harvest_partition` splits it into sub-windows, each with its own cursor
and ledger row, and the window verifies with exactly the provider's records.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from harvest_pipeline.errors import BadResumptionToken, DeferredError, HTTPStatusError
from harvest_pipeline.harvest import Window, harvest_partition, harvest_window
from harvest_pipeline.harvest.split import sub_windows
from harvest_pipeline.sources.registry import HttpSettings
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.window_parts import list_parts
from harvest_pipeline_tests.conftest import today, demo_source

pytestmark = pytest.mark.integration
FAST = HttpSettings(max_retries=1, backoff_base_seconds=0.01, backoff_max_seconds=0.02, retry_after_cap_seconds=1)


def days_window(first_days_ago: int, days: int) -> Window:
    start = today() - timedelta(days=first_days_ago)
    return Window(start, start + timedelta(days=days), f"{start:%Y-%m-%d}+{days}d")


def three_hours() -> Window:
    start = today() - timedelta(days=2, hours=-9)
    return Window(start, start + timedelta(hours=3), "3h")


def content(db_path) -> list[tuple]:
    with connect(db_path) as con:
        return con.execute("SELECT identifier, datestamp, deleted, content_hash FROM records ORDER BY identifier").fetchall()


def provider_total(provider, window: Window) -> int:
    return provider.stats(from_=window.start, until=window.end - timedelta(seconds=1))["total"]


@pytest.fixture(scope="module")
def clean(shared_demo, tmp_path_factory):
    """Each test window harvested whole from a well-behaved server (same corpus)."""
    out = {}
    for name, window in {"four": days_window(5, 4), "three_hours": three_hours()}.items():
        db = tmp_path_factory.mktemp(f"clean_{name}") / "h.duckdb"
        assert harvest_window(demo_source(shared_demo), window, db_path=db).status == ledger.VERIFIED
        out[name] = content(db)
    return out


def test_a_window_whose_tokens_expire_splits_into_days_and_verifies_with_the_providers_records(demo, db_path, tmp_path, clean):
    demo.set_options(token_expires_after_pages=3)  # 75 records per traversal at most; a day has 60
    window = days_window(5, 4)
    source = demo_source(demo, http=FAST)

    # Before: the whole window restarts twice, then fails.
    with pytest.raises(BadResumptionToken):
        harvest_window(source, window, db_path=tmp_path / "before" / "h.duckdb")

    report = harvest_partition(source, window, db_path=db_path)
    assert report.status == ledger.VERIFIED, report.checks
    assert all(v.passed for v in report.checks.values())
    assert content(db_path) == clean["four"]
    assert report.counts.received == provider_total(demo, window) == len(clean["four"])
    assert any("split into 4 sub-windows because the server's tokens kept expiring" in w for w in report.warnings)

    with connect(db_path) as con:
        row = con.execute(
            "SELECT status, split_into, split_reason, received, stored, complete_list_size, check_complete"
            " FROM harvest_windows WHERE source_id = 'demo'"
        ).fetchone()
        parts = list_parts(con, "demo", window.start)
    status, split_into, reason, received, stored, size, check = row
    assert (status, split_into, check) == ("verified", 4, "passed")
    assert "badResumptionToken" in reason
    assert [(p["part_start"], p["part_end"], p["depth"], p["status"]) for p in parts] == [
        (w.start.replace(tzinfo=None), w.end.replace(tzinfo=None), 1, "verified") for w in sub_windows(window, None, window.key)
    ]
    assert received == stored == size == sum(p["received"] for p in parts) == sum(p["complete_list_size"] for p in parts)
    # Every sub-window's cursor was its own folder, and each is gone once merged.
    assert not list((db_path.parent / "staging").rglob("*.stage"))


def test_timeouts_on_large_ranges_split_again_until_the_server_answers(demo, db_path, clean):
    demo.set_options(gateway_timeout_over_seconds=40 * 60)  # HTTP 504 for anything over 40 minutes
    window = three_hours()
    source = demo_source(demo, http=FAST)
    with pytest.raises(HTTPStatusError):
        harvest_window(source, window, db_path=db_path)

    report = harvest_partition(source, window, db_path=db_path)
    assert report.status == ledger.VERIFIED, report.checks
    assert content(db_path) == clean["three_hours"] and len(clean["three_hours"]) > 0
    with connect(db_path) as con:
        parts = list_parts(con, "demo", window.start)
        row = con.execute("SELECT split_into, received FROM harvest_windows").fetchone()
    hours = [p for p in parts if p["depth"] == 1]
    halves = [p for p in parts if p["depth"] == 2]
    assert row[0] == 3 and [h["split_into"] for h in hours] == [2, 2, 2]  # hours still time out: halves
    assert len(halves) == 6 and {h["status"] for h in halves} == {"verified"}
    assert all("HTTP 504" in h["split_reason"] for h in hours)
    # The counts add up at every level: halves -> hour -> window -> the provider.
    for h in hours:
        inside = [x for x in halves if h["part_start"] <= x["part_start"] < h["part_end"]]
        assert h["received"] == sum(x["received"] for x in inside) and h["status"] == "verified"
    assert row[1] == sum(h["received"] for h in hours) == provider_total(demo, window)


def test_a_split_stopped_by_a_deferral_resumes_keeping_the_sub_windows_that_passed(demo, db_path, tmp_path):
    # The window reaches into the day the server's clock is in: its sub-window for that day is
    # deferred (the server cannot have listed it all yet) after the others verified.
    window = days_window(3, 4)
    source = demo_source(demo, http=FAST)
    demo.set_options(token_expires_after_pages=3)
    with pytest.raises(DeferredError):
        harvest_partition(source, window, db_path=db_path, run_id="first")
    with connect(db_path) as con:
        assert ledger.get_window(con, "demo", window.start).status == ledger.DEFERRED
        first = {p["part_start"]: (p["status"], p["run_id"]) for p in list_parts(con, "demo", window.start)}
    assert [s for s, _ in first.values()] == ["verified", "verified", "verified", "deferred"]

    demo.set_options(token_expires_after_pages=3, now=today() + timedelta(days=1, minutes=2))  # the day is over
    report = harvest_partition(source, window, db_path=db_path, run_id="second")
    assert report.status == ledger.VERIFIED and report.resumed
    with connect(db_path) as con:
        after = {p["part_start"]: (p["status"], p["run_id"]) for p in list_parts(con, "demo", window.start)}
    assert [s for s, _ in after.values()] == ["verified"] * 4
    assert [r for _, r in after.values()] == ["first", "first", "first", "second"]  # the passed ones were kept

    demo.set_options(token_expires_after_pages=0)  # what a whole harvest now gets
    whole = tmp_path / "whole" / "h.duckdb"
    assert harvest_window(source, window, db_path=whole).status == ledger.VERIFIED
    assert content(db_path) == content(whole)


def test_sub_windows_follow_the_calendar_and_the_servers_granularity():
    month = Window(today().replace(day=1), (today().replace(day=1) + timedelta(days=32)).replace(day=1), "m")
    days = sub_windows(month, "YYYY-MM-DDThh:mm:ssZ", "m")
    assert len(days) in (28, 29, 30, 31) and days[0].start == month.start and days[-1].end == month.end
    assert all(d.end - d.start == timedelta(days=1) for d in days)
    hours = sub_windows(days[0], "YYYY-MM-DDThh:mm:ssZ", "m")
    assert len(hours) == 24 and hours[0].key == f"m/{month.start:%Y-%m-%dT%H:%M:%SZ}..{hours[0].end:%Y-%m-%dT%H:%M:%SZ}"
    assert [h.end - h.start for h in sub_windows(hours[0], "YYYY-MM-DDThh:mm:ssZ", "m")] == [timedelta(minutes=30)] * 2
    assert sub_windows(days[0], "YYYY-MM-DD", "m") == []  # a day server cannot be asked for less
    assert sub_windows(Window(month.start, month.start + timedelta(minutes=3), "x"), None, "x") == []
