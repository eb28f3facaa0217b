"""Statements the catalogue writer runs per window: the connection's kind asked once, a new
window's ledger row inserted in one statement (a stored one still updated, never doubled)."""

from __future__ import annotations

from datetime import datetime, timedelta

from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.backend import EMBEDDED, dialect


class Counted:
    """A connection whose statements are counted (DuckDB's own connection takes no attributes)."""

    def __init__(self, con):
        self.con, self.statements = con, []

    def execute(self, sql, *args):
        self.statements.append(sql)
        return self.con.execute(sql, *args)


def test_a_connections_kind_is_asked_once(tmp_path):
    with connect(tmp_path / "harvest.duckdb") as con:
        counted = Counted(con)
        assert [dialect(counted) for _ in range(3)] == [EMBEDDED] * 3
        assert len(counted.statements) == 1
        other = Counted(con)  # another connection is asked again
        assert dialect(other) == EMBEDDED and len(other.statements) == 1


def _begin(con, run_id: str, start: datetime) -> None:
    ledger.begin_window(con, source_id="s", window_start=start, window_end=start + timedelta(days=1),
                        partition_key=start.date().isoformat(), run_id=run_id, from_param="a", until_param="b")


def test_a_new_windows_row_takes_one_statement_and_a_window_begun_again_is_updated(tmp_path):
    start = datetime(2026, 1, 1)
    with connect(tmp_path / "harvest.duckdb") as con:
        counted = Counted(con)
        dialect(counted)  # asked once per connection (above); not what is counted here
        counted.statements.clear()
        _begin(counted, "run-1", start)
        assert len(counted.statements) == 1
        assert con.execute("SELECT status, run_id, attempts FROM harvest_windows").fetchall() == [("running", "run-1", 1)]
        _begin(counted, "run-2", start)  # begun again: the stored row is updated
        rows = con.execute("SELECT status, run_id, attempts FROM harvest_windows").fetchall()
        assert rows == [("running", "run-2", 2)]
        assert len(counted.statements) == 3  # the INSERT found the key stored; the UPDATE wrote it
