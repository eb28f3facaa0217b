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


def _insert_nothing(gate, running):
    def body(con):
        running.set()
        gate.wait(10)
    return body
