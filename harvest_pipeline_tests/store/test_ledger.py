"""Windows' verdict rows written together are the rows written one by one, in one statement."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from harvest_pipeline.store import connect, ledger
from harvest_pipeline_tests.store.test_backend import Counted

DAY = datetime(2026, 1, 1)
COLUMNS = "source_id, status, error, received, cursor_closed, warnings, check_complete, seconds IS NOT NULL"


def _verdict(n: int) -> dict:
    return dict(status="verified" if n % 2 else "incomplete", run_id="run", error=None, received=100 + n,
                cursor_closed=bool(n % 2), warnings=[f"warning {n}"] if n else [], check_complete="passed",
                retry_not_before=None)


def _ledger_rows(db, together: bool) -> tuple[list, list[str]]:
    with connect(db) as con:
        for n in range(3):
            ledger.begin_window(con, source_id=f"s{n}", window_start=DAY, window_end=DAY + timedelta(days=1),
                                partition_key="2026-01-01", run_id="run", from_param="a", until_param="b")
        counted = Counted(con)
        if together:
            with ledger.finishing_together(counted):
                for n in range(3):
                    ledger.finish_window(counted, source_id=f"s{n}", window_start=DAY, **_verdict(n))
        else:
            for n in range(3):
                ledger.finish_window(counted, source_id=f"s{n}", window_start=DAY, **_verdict(n))
        rows = con.execute(f"SELECT {COLUMNS} FROM harvest_windows ORDER BY source_id").fetchall()
    return rows, [s for s in counted.statements if s.lstrip().startswith("UPDATE")]


def test_verdicts_written_together_equal_those_written_one_by_one(tmp_path):
    alone, alone_updates = _ledger_rows(tmp_path / "alone.duckdb", together=False)
    together, together_updates = _ledger_rows(tmp_path / "together.duckdb", together=True)
    assert together == alone
    assert [r[1] for r in together] == ["incomplete", "verified", "incomplete"] and together[1][5] == ["warning 1"]
    assert (len(alone_updates), len(together_updates)) == (3, 1)


def test_an_error_inside_leaves_the_verdicts_unwritten(tmp_path):
    with connect(tmp_path / "harvest.duckdb") as con:
        ledger.begin_window(con, source_id="s", window_start=DAY, window_end=DAY + timedelta(days=1),
                            partition_key="2026-01-01", run_id="run", from_param="a", until_param="b")
        with pytest.raises(RuntimeError):
            with ledger.finishing_together(con):
                ledger.finish_window(con, source_id="s", window_start=DAY, **_verdict(1))
                raise RuntimeError("the group's transaction fails")
        assert con.execute("SELECT status FROM harvest_windows").fetchall() == [("running",)]
        ledger.finish_window(con, source_id="s", window_start=DAY, **_verdict(1))  # outside: written at once
        assert con.execute("SELECT status FROM harvest_windows").fetchall() == [("verified",)]


def _watermark_ledger(db) -> None:
    """Four daily windows of four sources: s0 all verified, s1 the third failed, s2 none verified,
    s3 all verified and a watermark stored after its second."""
    with connect(db) as con:
        for n in range(4):
            for d in range(4):
                ledger.begin_window(con, source_id=f"s{n}", window_start=DAY + timedelta(days=d),
                                    window_end=DAY + timedelta(days=d + 1), partition_key=f"d{d}", run_id="run",
                                    from_param="a", until_param="b")
        con.execute("UPDATE harvest_windows SET status = 'verified' WHERE source_id <> 's2'")
        con.execute("UPDATE harvest_windows SET status = 'failed' WHERE source_id = 's1' AND partition_key = 'd2'")
        ledger.set_watermark(con, "s3", DAY + timedelta(days=2))


def test_watermarks_advanced_together_equal_those_advanced_one_by_one(tmp_path):
    from harvest_pipeline.harvest.watermark import advance_stored, advance_stored_many

    windows = [(f"d{d}", DAY + timedelta(days=d), DAY + timedelta(days=d + 1)) for d in range(4)]
    sources = [f"s{n}" for n in range(4)]
    _watermark_ledger(tmp_path / "alone.duckdb")
    _watermark_ledger(tmp_path / "together.duckdb")
    with connect(tmp_path / "alone.duckdb") as con:
        alone = {s: advance_stored(con, s, windows) for s in sources}
        stored_alone = {s: ledger.get_watermark(con, s) for s in sources}
    with connect(tmp_path / "together.duckdb") as con:
        counted = Counted(con)
        together = advance_stored_many(counted, {s: windows for s in sources})
        stored_together = {s: ledger.get_watermark(con, s) for s in sources}
    assert together == alone == {"s0": DAY + timedelta(days=4), "s1": DAY + timedelta(days=2), "s2": None,
                                 "s3": DAY + timedelta(days=4)}
    assert stored_together == stored_alone == together
    # Read the watermarks, read the windows, write the moved ones (an UPDATE, then an INSERT for
    # the sources without a source_state row): four statements for four sources (besides the
    # question of the connection's kind, asked once per connection).
    statements = [s for s in counted.statements if "duckdb_databases()" not in s]
    assert len(statements) == 4, statements


def test_many_sources_windows_and_quirks_read_together_equal_those_read_one_by_one(tmp_path):
    """A batch run reads what its sources' windows start from in two statements: the same answers
    as one source and one window at a time, windows never harvested and sources without quirks
    included."""
    from harvest_pipeline.store.window_parts import mark_window_split, window_state, window_states
    from harvest_pipeline_tests.conftest import day_window

    days = [day_window(n) for n in (3, 2, 1)]
    with connect(tmp_path / "c.duckdb") as con:
        for source_id in ("a", "b"):
            ledger.record_identify(con, source_id, granularity="YYYY-MM-DD", earliest_datestamp="2020-01-01",
                                   deleted_record="persistent")
        ledger.add_quirks(con, "a", {"continuation-needs-arguments"})
        ledger.begin_window(con, source_id="a", window_start=days[0].start, window_end=days[0].end,
                            partition_key=days[0].key, run_id="r", from_param=None, until_param=None)
        mark_window_split(con, source_id="b", window=days[1], run_id="r", split_into=4, reason="too large")
        wanted = {"a": [w.start for w in days], "b": [w.start for w in days], "c": [days[0].start]}
        together = window_states(con, wanted)
        one_by_one = {(s, start.replace(tzinfo=None)): window_state(con, s, start)
                      for s, starts in wanted.items() for start in starts}
        assert together == {k: v for k, v in one_by_one.items() if v is not None}
        assert together[("b", days[1].start.replace(tzinfo=None))].split_into == 4
        assert len(together) == 2  # a's first day and b's second: the others never harvested
        quirks = ledger.quirks_of(con, ["a", "b", "c"])
        assert quirks == {s: ledger.get_quirks(con, s) for s in ("a", "b", "c")}
        assert quirks == {"a": {"continuation-needs-arguments"}, "b": set(), "c": set()}
