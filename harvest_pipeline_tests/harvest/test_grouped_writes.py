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
