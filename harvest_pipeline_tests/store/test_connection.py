"""Opening the catalogue from several threads of one process (the code server runs every sensor).

DuckDB shares one database instance per file inside a process and refuses a second open whose
configuration differs (read-only next to read-write). Seen live: `catalog_refresh` (read-only)
skipped ticks next to a watermark sensor (read-write) with a hint about the path and permissions.
"""

from __future__ import annotations

import threading
import time

import dagster as dg
import pytest

from harvest_pipeline.defs.catalog import build_catalog_job, build_catalog_sensor
from harvest_pipeline.errors import StoreLockedError
from harvest_pipeline.store import connect


def test_a_read_only_open_next_to_a_writer_in_the_same_process_reads(tmp_path):
    db = tmp_path / "harvest.duckdb"
    with connect(db) as writer:
        writer.execute("CREATE TABLE written_here AS SELECT 'demo' AS source_id")
        with connect(db, read_only=True, wait_seconds=1) as reader:
            assert reader.execute("SELECT source_id FROM written_here").fetchall() == [("demo",)]


def test_a_writer_next_to_a_read_only_open_waits_for_it_then_opens(tmp_path):
    db = tmp_path / "harvest.duckdb"
    with connect(db):
        pass
    reader_open, release = threading.Event(), threading.Event()

    def read():
        with connect(db, read_only=True):
            reader_open.set()
            release.wait(5)

    thread = threading.Thread(target=read)
    thread.start()
    reader_open.wait(5)
    threading.Timer(0.5, release.set).start()
    started = time.monotonic()
    with connect(db, wait_seconds=10) as writer:
        writer.execute("CREATE TABLE written_here AS SELECT 1 AS x")
    assert time.monotonic() - started >= 0.4
    thread.join()


def test_a_writer_that_waits_too_long_is_told_the_real_cause(tmp_path):
    db = tmp_path / "harvest.duckdb"
    with connect(db):
        pass
    with connect(db, read_only=True):
        with pytest.raises(StoreLockedError) as err:
            with connect(db, wait_seconds=0.3):
                pass
    text = f"{err.value}"
    assert "this process already holds the file open read-only" in text
    assert "HARVEST_DUCKDB_PATH" not in text


def test_catalog_sensor_ticks_while_another_sensor_holds_the_catalogue_for_writing(tmp_path, monkeypatch):
    db = tmp_path / "harvest.duckdb"
    monkeypatch.setenv("HARVEST_DUCKDB_PATH", str(db))
    sensor = build_catalog_sensor(build_catalog_job())
    with dg.instance_for_test() as instance, connect(db) as watermark_sensor_connection:
        watermark_sensor_connection.execute("SELECT count(*) FROM harvest_windows").fetchone()
        result = sensor(dg.build_sensor_context(instance=instance))
    assert isinstance(result, dg.SensorResult), result
    assert len(result.run_requests) == 1


def test_the_catalogue_is_written_in_small_row_groups(tmp_path):
    """A checkpoint holds about one row group in memory: the catalogue is opened with 16,384 rows
    per row group (an option of the open, not of the file), not DuckDB's 122,880."""
    from harvest_pipeline.store.connection import CATALOGUE_ROW_GROUP_SIZE

    db = tmp_path / "harvest.duckdb"
    with connect(db) as con:
        con.execute("CREATE TABLE wide AS SELECT range AS i, repeat('x', 100) AS xml FROM range(50000)")
        con.execute("CHECKPOINT")
        groups = con.execute("SELECT max(count) FROM pragma_storage_info('wide')").fetchone()[0]
    assert groups <= CATALOGUE_ROW_GROUP_SIZE == 16_384


def test_connections_of_one_process_share_the_catalogue_and_the_last_close_frees_the_file(tmp_path):
    import subprocess
    import sys

    db = tmp_path / "harvest.duckdb"
    probe = ("import duckdb, sys\n"
             "try:\n    duckdb.connect(sys.argv[1]).close(); print('opened')\n"
             "except duckdb.Error as exc:\n    print('locked', exc)\n")

    def other_process_opens() -> bool:
        out = subprocess.run([sys.executable, "-c", probe, str(db)], capture_output=True, text=True, timeout=60).stdout
        return out.startswith("opened")

    with connect(db) as first:
        first.execute("CREATE TABLE t AS SELECT 1 AS x")
        with connect(db) as second, connect(db, read_only=True) as reader:
            second.execute("INSERT INTO t VALUES (2)")
            assert reader.execute("SELECT sum(x) FROM t").fetchone()[0] == 3
        assert first.execute("SELECT count(*) FROM t").fetchone()[0] == 2
        assert not other_process_opens()
    assert other_process_opens()


def test_an_open_that_waited_long_for_another_process_says_so(tmp_path, monkeypatch, caplog):
    """A run waiting for the file another process holds would sit silent; past LONG_WAIT_SECONDS
    the open logs how long it waited and who may hold the file."""
    import subprocess
    import sys

    from harvest_pipeline.store import connection

    db = tmp_path / "harvest.duckdb"
    with connect(db):
        pass
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time\ncon = duckdb.connect(sys.argv[1])\nprint('held', flush=True)\n"
         "time.sleep(1.5)\ncon.close()\n", str(db)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(connection, "LONG_WAIT_SECONDS", 0.5)
        caplog.set_level("WARNING", logger="harvest_pipeline.store.connection")
        with connect(db, wait_seconds=30) as con:
            assert con.execute("SELECT 1").fetchone() == (1,)
    finally:
        holder.wait(30)
    said = [r.getMessage() for r in caplog.records if r.name == "harvest_pipeline.store.connection"]
    assert len(said) == 1 and "to open the catalogue" in said[0] and str(db) in said[0], said
    waited = float(said[0].split("waited ")[1].split(" s")[0])
    assert waited >= 0.5
    # an open that did not wait says nothing
    caplog.clear()
    with connect(db):
        pass
    assert not [r for r in caplog.records if r.name == "harvest_pipeline.store.connection"]
