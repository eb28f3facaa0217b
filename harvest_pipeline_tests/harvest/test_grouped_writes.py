"""The process's catalogue writer: writes that wait together share a transaction, and keep their own outcomes."""

import threading

import pytest

from harvest_pipeline.harvest.grouped_writes import GroupedWriter
from harvest_pipeline.store import connect


@pytest.fixture
def writer(tmp_path):
    db = tmp_path / "cat.duckdb"
    with connect(db) as con:
        con.execute("CREATE TABLE t (n INTEGER, tx TIMESTAMPTZ)")
    return GroupedWriter(lambda: connect(db)), db


def _insert(n, gate=None, running=None):
    def body(con):
        if running is not None:
            running.set()
        if gate is not None:
            gate.wait(10)
        con.execute("INSERT INTO t VALUES (?, now())  -- now(): the transaction's start", [n])
        return n
    return body


def test_writes_that_wait_together_share_one_transaction(writer):
    writer, db = writer
    gate, running = threading.Event(), threading.Event()
    first = writer.write(_insert(0, gate, running), what="first")  # holds the writer while the others queue
    assert running.wait(10)
    later = [writer.write(_insert(n), what=f"write {n}") for n in range(1, 6)]
    gate.set()
    assert [f.result(10) for f in [first, *later]] == list(range(6))
    with connect(db) as con:
        transactions = dict(con.execute("SELECT n, tx FROM t").fetchall())
    assert transactions[0] != transactions[1]
    assert len({transactions[n] for n in range(1, 6)}) == 1


def test_a_failing_write_fails_alone_and_the_others_of_its_group_are_written(writer):
    writer, db = writer
    gate = threading.Event()

    def broken(con):
        con.execute("INSERT INTO t VALUES (99, now())")
        raise RuntimeError("this write is broken")

    running = threading.Event()
    first = writer.write(_insert(0, gate, running), what="first")
    assert running.wait(10)
    good, bad, also_good = (writer.write(_insert(1), what="good"), writer.write(broken, what="bad"),
                            writer.write(_insert(2), what="also good"))
    gate.set()
    assert (first.result(10), good.result(10), also_good.result(10)) == (0, 1, 2)
    with pytest.raises(RuntimeError, match="this write is broken"):
        bad.result(10)
    with connect(db) as con:
        assert sorted(n for (n,) in con.execute("SELECT n FROM t").fetchall()) == [0, 1, 2]  # nothing of the bad one


def test_a_window_whose_verdict_fails_leaves_the_other_merges_of_its_group_written(tmp_path, monkeypatch):
    from harvest_pipeline.harvest import grouped_writes
    from harvest_pipeline_tests.store.test_merge_group import T, _stage, _x

    grouped = []
    real = grouped_writes.merge_staged_windows
    monkeypatch.setattr(grouped_writes, "merge_staged_windows",
                        lambda con, staged: grouped.append([w.source_id for w in staged]) or real(con, staged))
    db = tmp_path / "cat.duckdb"
    writer = GroupedWriter(lambda: connect(db))
    windows = {s: _stage(db, s, [[(f"{s}-{i}", T, False, _x(i)) for i in range(4)]], f"run-{s}") for s in "abc"}
    gate, running = threading.Event(), threading.Event()
    first = writer.write(_insert_nothing(gate, running), what="first")
    assert running.wait(10)

    def verdict(source_id):
        def finish(con, counts):
            if source_id == "b":
                raise RuntimeError("the verdict of b cannot be written")
            return counts.created
        return finish

    def alone(window, finish):
        return lambda con: finish(con, window.merge_alone(con))

    futures = {s: writer.merge(w, verdict(s), alone=alone(w, verdict(s)), what=f"merge {s}") for s, w in windows.items()}
    gate.set()
    first.result(10)
    assert (futures["a"].result(10), futures["c"].result(10)) == (4, 4)
    with pytest.raises(RuntimeError, match="verdict of b"):
        futures["b"].result(10)
    with connect(db) as con:
        stored = dict(con.execute("SELECT source_id, count(*) FROM records GROUP BY 1").fetchall())
    assert stored == {"a": 4, "c": 4}  # b's merge went with its failed verdict
    assert grouped == [["a", "b", "c"]]  # tried as one group first, then one by one


@pytest.mark.parametrize("threads", ["1", "2"])
def test_the_ledger_rows_of_a_hundred_and_fifty_new_windows_fit_their_transactions(tmp_path, monkeypatch, caplog, threads):
    """A batch run's writer puts the ledger rows of windows that begin together in one transaction.
    DuckDB's MERGE held about 0.9 MB per new row until the commit: in the 100-source bench, groups
    of about 120 writes ran out of the default 128 MB and were written again one by one. On one
    DuckDB thread (as batch runs set it) the rows hold next to nothing; on two, each INSERT holds
    the same 0.9 MB, and a group takes at most MAX_GROUP_WRITES writes."""
    from datetime import datetime, timedelta

    from harvest_pipeline.store import ledger

    monkeypatch.setenv("HARVEST_DUCKDB_THREADS", threads)
    monkeypatch.delenv("HARVEST_DUCKDB_MEMORY_LIMIT", raising=False)  # the default limit
    db = tmp_path / "harvest.duckdb"
    writer = GroupedWriter(lambda: connect(db))
    day = datetime(2026, 11, 1)

    def begin(n):
        def body(con):
            ledger.begin_window(con, source_id=f"s{n:03d}", window_start=day, window_end=day + timedelta(days=1),
                                partition_key="2026-11-01", run_id="run", from_param="2026-11-01", until_param="2026-11-01")
            ledger.set_watermark(con, f"s{n:03d}", day)
            return n
        return body

    gate, running = threading.Event(), threading.Event()
    first = writer.write(_insert_nothing(gate, running), what="first")  # holds the writer while the others queue
    assert running.wait(10)
    begun = [writer.write(begin(n), what=f"begin {n}") for n in range(150)]
    with caplog.at_level("WARNING", logger="harvest_pipeline.harvest.grouped_writes"):
        gate.set()
        assert [f.result(60) for f in begun] == list(range(150))
        first.result(10)
    assert not [r for r in caplog.records if "writing them one by one" in r.getMessage()]
    with connect(db) as con:
        assert con.execute("SELECT count(*), min(attempts), max(attempts) FROM harvest_windows").fetchone() == (150, 1, 1)
        assert con.execute("SELECT count(*) FROM source_state WHERE watermark = ?", [day]).fetchone() == (150,)
    # The same rows again: each key is updated, not inserted twice.
    again = [writer.write(begin(n), what=f"begin {n} again") for n in range(150)]
    assert [f.result(60) for f in again] == list(range(150))
    with connect(db) as con:
        assert con.execute("SELECT count(*), min(attempts), max(attempts) FROM harvest_windows").fetchone() == (150, 2, 2)


def test_ledger_rows_waiting_together_are_written_together_and_each_keeps_its_own_part(tmp_path, monkeypatch):
    """Windows beginning together: their rows go to the catalogue together (into the embedded file,
    one UPDATE for the stored keys and one INSERT for the new ones), and each write's own part
    before its row (a source's Identify) still runs, in order."""
    from datetime import datetime, timedelta

    from harvest_pipeline.store import backend, ledger

    db = tmp_path / "harvest.duckdb"
    writer = GroupedWriter(lambda: connect(db))
    day = datetime(2026, 11, 1)
    row = lambda n: ledger.begin_row(  # noqa: E731
        source_id=f"s{n:03d}", window_start=day, window_end=day + timedelta(days=1), partition_key="2026-11-01",
        run_id="run", from_param="2026-11-01", until_param="2026-11-01")
    with connect(db) as con:
        ledger.begin_window(con, **{**dict(source_id="s000", window_start=day, window_end=day + timedelta(days=1),
                                           partition_key="2026-11-01", run_id="before", from_param="a", until_param="b")})
    statements = []
    real = backend.upsert_rows_in_place

    def counted(con, upsert, rows):
        statements.append(len(rows))
        return real(con, upsert, rows)

    monkeypatch.setattr("harvest_pipeline.harvest.grouped_writes.upsert_rows_in_place", counted)
    before_order = []
    gate, running = threading.Event(), threading.Event()
    first = writer.write(_insert_nothing(gate, running), what="first")  # holds the writer while the others queue
    assert running.wait(10)
    begun = [writer.upsert(*row(n), before=lambda con, n=n: before_order.append(n), what=f"begin {n}") for n in range(30)]
    gate.set()
    assert [f.result(30) for f in begun] == [None] * 30
    first.result(10)
    assert statements == [30] and before_order == list(range(30))  # one set of statements for the 30 rows
    with connect(db) as con:
        rows = con.execute("SELECT source_id, run_id, attempts FROM harvest_windows ORDER BY source_id").fetchall()
    assert rows == [("s000", "run", 2)] + [(f"s{n:03d}", "run", 1) for n in range(1, 30)]


def test_two_rows_of_one_new_key_in_a_group_are_written_one_by_one(tmp_path, caplog):
    from datetime import datetime, timedelta

    from harvest_pipeline.store import ledger

    db = tmp_path / "harvest.duckdb"
    writer = GroupedWriter(lambda: connect(db))
    day = datetime(2026, 11, 1)
    row = dict(source_id="s", window_start=day, window_end=day + timedelta(days=1), partition_key="2026-11-01",
               run_id="run", from_param="a", until_param="b")
    gate, running = threading.Event(), threading.Event()
    first = writer.write(_insert_nothing(gate, running), what="first")
    assert running.wait(10)
    twice = [writer.upsert(*ledger.begin_row(**row), what=f"begin {n}") for n in range(2)]
    with caplog.at_level("WARNING", logger="harvest_pipeline.harvest.grouped_writes"):
        gate.set()
        assert [f.result(30) for f in twice] == [None, None]
        first.result(10)
    assert [r for r in caplog.records if "writing them one by one" in r.getMessage()]  # the key was refused once
    with connect(db) as con:
        assert con.execute("SELECT count(*), max(attempts) FROM harvest_windows").fetchone() == (1, 2)


def _insert_nothing(gate, running):
    def body(con):
        running.set()
        gate.wait(10)
    return body


def test_the_sources_of_a_process_share_one_writer_into_a_shared_catalogue(tmp_path, monkeypatch):
    """The writer is found by its connect(): each source's harvest (and each source's WindowRun in
    a batch run) asks for one, so into PostgreSQL they must get equal connect()s or every source
    writes alone (groups of one, measured in the 100-source bench before this was fixed)."""
    from harvest_pipeline.defs.resources import CatalogueResource, catalogue_connector
    from harvest_pipeline.harvest.grouped_writes import grouped_writer
    from harvest_pipeline.store.connection import connection_config
    from harvest_pipeline.store.session import catalogue_connect

    db = tmp_path / "harvest.duckdb"
    dsn = "postgresql://harvest:s3cret-pw@127.0.0.1:9/catalogue"  # nothing connects in this test
    resource = CatalogueResource(database=str(db), connection_config=connection_config(db),
                                 catalogue="postgres", pg_dsn=dsn)
    # Equal connect()s (a value, as the embedded session's bound method is): one writer.
    assert catalogue_connector(resource) == catalogue_connector(resource)
    assert grouped_writer(catalogue_connector(resource)) is grouped_writer(catalogue_connector(resource))
    assert "s3cret-pw" not in repr(catalogue_connector(resource))  # a repr may reach a log or a traceback
    monkeypatch.setenv("HARVEST_CATALOGUE", "postgres")
    monkeypatch.setenv("HARVEST_CATALOGUE_PG_DSN", dsn)
    assert catalogue_connect(db) == catalogue_connect(db)
    assert grouped_writer(catalogue_connect(db)) is grouped_writer(catalogue_connect(db))
