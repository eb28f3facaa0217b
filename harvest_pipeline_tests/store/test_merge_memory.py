"""A large window's merge writes at a lower DuckDB memory limit and gives the whole limit back."""

from datetime import timedelta

import duckdb
import pyarrow as pa
import pytest

from harvest_pipeline.store import connect, merge_memory
from harvest_pipeline.store import merge as merge_module
from harvest_pipeline.store.merge import merge_staging
from harvest_pipeline.store.staging import StagingWindow, staging_path
from harvest_pipeline_tests.store.test_merge import W0, W1, _rows

WHOLE, LOWER, FINGERPRINTS = "122.0 MiB", "61.0 MiB", "61.0 MiB"  # 128MB, 64MB and 64MB as DuckDB shows them


def _limit(con) -> str:
    with con.cursor() as c:
        return c.execute("SELECT current_setting('memory_limit')").fetchone()[0]


def _limits_seen(monkeypatch, module, name) -> list[str]:
    """Patch `module.name` (called with a connection first) to note the memory limit at each call."""
    seen, original = [], getattr(module, name)

    def watched(con, *args, **kwargs):
        seen.append(_limit(con))
        return original(con, *args, **kwargs)

    monkeypatch.setattr(module, name, watched)
    return seen


def _stage_three_pages(db):
    t = W0 + timedelta(hours=1)
    path = staging_path(db, "src", W0)
    st = StagingWindow(path)
    st.start_attempt("run", "k")
    for number in (1, 2, 3):
        rows = _rows((f"r{number}a", t, False, "<x>a</x>"), (f"r{number}b", t, False, "<x>b</x>"))
        rows = rows.set_column(rows.schema.get_field_index("page_number"), "page_number", pa.array([number] * 2, pa.int32()))
        st.write_page(rows, next_token=None if number == 3 else f"t{number}", complete_list_size=None,
                      response_date=None, warnings=[])
    st.close()
    return path


@pytest.fixture
def db(tmp_path, monkeypatch):
    monkeypatch.delenv("HARVEST_DUCKDB_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr(merge_module, "MERGE_SLICE_ROWS", 2)  # these 6 records make a large window,
    monkeypatch.setattr(merge_module, "LARGE_WINDOW_ROWS", 2)  # written in slices
    return tmp_path / "cat.duckdb"


@pytest.fixture
def shared_instance(monkeypatch):
    """One DuckDB instance at 128 MB and two cursors of it: two merges of one process."""
    monkeypatch.delenv("HARVEST_DUCKDB_MEMORY_LIMIT", raising=False)
    root = duckdb.connect(config={"memory_limit": "128MB"})
    return root, root.cursor(), root.cursor()


def test_a_large_window_classifies_at_the_whole_limit_writes_at_a_lower_one_and_gives_it_back(db, monkeypatch):
    classifying = _limits_seen(monkeypatch, merge_module, "small_list")
    writing = _limits_seen(monkeypatch, merge_module, "_write_slice")
    path = _stage_three_pages(db)
    with connect(db) as con:
        assert _limit(con) == WHOLE
        con.execute("BEGIN TRANSACTION")
        counts = merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="run", attempt_id="run")
        con.execute("COMMIT")
        after = _limit(con)
        stored = con.execute("SELECT count(*) FROM records").fetchone()[0]
    assert (set(classifying), set(writing)) == ({WHOLE}, {LOWER})
    assert after == WHOLE
    assert (counts.created, stored) == (6, 6)


def test_a_large_window_that_updates_stored_rows_writes_at_the_whole_limit(db, monkeypatch):
    # Updating rows in place needs it: 1,000,000 new versions ran out of memory at the lower limit.
    path = _stage_three_pages(db)
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="run", attempt_id="run")
        con.execute("COMMIT")
        con.execute("UPDATE records SET datestamp = datestamp - INTERVAL 1 HOUR")  # the staged versions are newer
    seen = _limits_seen(monkeypatch, merge_module, "_write_slice")
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        counts = merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="again", attempt_id="again")
        con.execute("COMMIT")
        assert _limit(con) == WHOLE
    assert counts.updated == 6
    assert set(seen) == {WHOLE}


def test_a_failed_large_merge_gives_the_whole_limit_back(db, monkeypatch):
    def failing_write_slice(con, *args, **kwargs):
        raise RuntimeError("disk full")

    monkeypatch.setattr(merge_module, "_write_slice", failing_write_slice)
    path = _stage_three_pages(db)
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        with pytest.raises(RuntimeError, match="disk full"):
            merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="run", attempt_id="run")
        con.execute("ROLLBACK")
        assert _limit(con) == WHOLE


def test_merges_sharing_an_instance_lower_the_limit_only_when_none_still_classifies(shared_instance):
    root, a, b = shared_instance
    merge_memory.classifying(a)
    merge_memory.classifying(b)
    merge_memory.writing(a)
    assert _limit(root) == WHOLE  # b still classifies
    merge_memory.writing(b)
    assert _limit(root) == LOWER
    merge_memory.classifying(a2 := root.cursor())  # a third merge begins: whole again before it reads
    assert _limit(root) == WHOLE
    merge_memory.done(a2)
    merge_memory.done(a)
    assert _limit(root) == WHOLE
    merge_memory.done(b)
    assert _limit(root) == WHOLE


def test_a_large_window_found_stored_fingerprints_at_a_lower_limit_then_classifies_at_the_whole_one(db, monkeypatch):
    # The md5 over the stored versions' XML filled DuckDB's pool to the limit: the peak of a
    # window merged again (bench --rss).
    after, fingerprinted = [], merge_memory.fingerprinted

    def watched_fingerprinted(con):
        fingerprinted(con)
        after.append(_limit(con))

    path = _stage_three_pages(db)
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="run", attempt_id="run")
        con.execute("COMMIT")
    compared = _limits_seen(monkeypatch, merge_module, "_compare_fingerprints")
    monkeypatch.setattr(merge_memory, "fingerprinted", watched_fingerprinted)
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        counts = merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="again", attempt_id="again")
        con.execute("COMMIT")
        assert _limit(con) == WHOLE
    assert (compared, after) == ([FINGERPRINTS], [WHOLE])
    assert counts.unchanged == 6


def test_fingerprints_keep_the_whole_limit_while_another_large_merge_runs(shared_instance):
    root, a, b = shared_instance
    merge_memory.classifying(a)
    merge_memory.fingerprinting(a)
    assert _limit(root) == FINGERPRINTS  # the only large merge
    merge_memory.classifying(b)  # another begins: whole before it reads
    assert _limit(root) == WHOLE
    merge_memory.fingerprinted(a)
    merge_memory.fingerprinting(b)
    assert _limit(root) == WHOLE  # a is still a large merge of this instance
    merge_memory.fingerprinted(b)
    merge_memory.done(a)
    merge_memory.done(b)
    assert _limit(root) == WHOLE


def test_fingerprints_that_run_out_of_memory_at_the_lower_limit_are_taken_again_at_the_whole_limit(tmp_path, monkeypatch, caplog):
    # Forced with a lower limit far too small for 5,000 stored versions (a real DuckDB out-of-memory).
    import logging

    from harvest_pipeline.bench.upsert_section import build_staging, merge_into
    from harvest_pipeline.store.backend import run_write

    monkeypatch.delenv("HARVEST_DUCKDB_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr(merge_memory, "_lowering_off", False)
    staged = build_staging(tmp_path / "window.stage", 0, 5_000, version=0)
    db = tmp_path / "cat.duckdb"
    merge_into(db, staged)
    monkeypatch.setattr(merge_memory, "fingerprint_limit", lambda limit: "2MB")
    fingerprinted_at = _limits_seen(monkeypatch, merge_module, "_read_same_versions")
    with caplog.at_level(logging.WARNING):
        counts = run_write(lambda: connect(db), lambda con: merge_staging(
            con, staged, source_id="bench", window_start=W0, window_end=W1, run_id="again", attempt_id="again"),
            what="source bench, window w0: merge", log=logging.getLogger("t"))
    retries = [r.getMessage() for r in caplog.records if "ran out of memory at the lower limit" in r.getMessage()]
    assert len(retries) == 1 and retries[0].startswith("source bench, window w0: merge:")
    assert fingerprinted_at == ["1.9 MiB", WHOLE]  # the lower limit, then the whole one
    assert counts.unchanged == 5_000
    with connect(db) as con:
        assert _limit(con) == WHOLE
        again = con.execute("SELECT count(*), count(DISTINCT identifier) FROM record_history WHERE run_id = 'again'").fetchone()
    assert again == (5_000, 5_000)  # the failed attempt left nothing


def test_the_lower_limits_are_shares_of_the_configured_one_never_below_their_floors():
    assert merge_memory.write_limit("128MB") == "64000KB"
    assert merge_memory.write_limit("1GiB") == "536870KB"
    assert merge_memory.write_limit("64MB") is None  # 32 MB would be below the floor
    assert merge_memory.write_limit("50%") is None  # a form it does not read: left whole
    assert merge_memory.fingerprint_limit("128MB") == "64000KB"
    assert merge_memory.fingerprint_limit("64MB") is None  # 32 MB ran out of memory at 100,000 records


def test_a_large_window_merged_again_unchanged_fits_a_limit_the_window_outgrows(tmp_path, monkeypatch):
    # The fingerprints of a window found already stored went into `stored` by UPDATE, whose new
    # values DuckDB holds in memory until the commit: 1,000,000 records did not fit in 256 MB.
    # Tables written by queries spill. Scaled down: 100,000 records (about 130 MB staged) at 64 MB.
    from harvest_pipeline.bench.upsert_section import build_staging, merge_into

    staged = build_staging(tmp_path / "window.stage", 0, 100_000, version=0)
    db = tmp_path / "cat.duckdb"
    _, first, _ = merge_into(db, staged)
    monkeypatch.setenv("HARVEST_DUCKDB_MEMORY_LIMIT", "64MB")
    _, again, _ = merge_into(db, staged)
    assert (first.created, again.unchanged, again.changed) == (100_000, 100_000, 0)


def test_a_large_window_merges_on_one_thread_and_gives_the_instance_its_threads_back(db, monkeypatch):
    # `threads` belongs to the DuckDB instance, which a batch run's merges share: one large window
    # left every later merge of the process on one thread.
    seen = set()
    small_list = merge_module.small_list

    def watched_small_list(con, query, *limit):
        with con.cursor() as c:
            seen.add(c.execute("SELECT current_setting('threads')").fetchone()[0])
        return small_list(con, query, *limit)

    monkeypatch.setattr(merge_module, "small_list", watched_small_list)
    path = _stage_three_pages(db)
    with connect(db) as con:
        con.execute("SET threads = 3")
        con.execute("BEGIN TRANSACTION")
        merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="run", attempt_id="run")
        con.execute("COMMIT")
        after = con.execute("SELECT current_setting('threads')").fetchone()[0]
    assert (seen, after) == ({1}, 3)


def test_writes_that_run_out_of_memory_at_the_lower_limit_are_merged_again_at_the_whole_limit(tmp_path, monkeypatch, caplog):
    # The lower limit is a saving: a 100,000-record window's writes ran out of it now and then.
    # Forced here with a lower limit far too small for 5,000 records (a real DuckDB out-of-memory).
    import logging

    from harvest_pipeline.bench.upsert_section import build_staging
    from harvest_pipeline.store.backend import run_write

    monkeypatch.delenv("HARVEST_DUCKDB_MEMORY_LIMIT", raising=False)
    monkeypatch.setattr(merge_memory, "_lowering_off", False)
    monkeypatch.setattr(merge_memory, "write_limit", lambda limit: "4MB")
    staged = build_staging(tmp_path / "window.stage", 0, 5_000, version=0)
    db = tmp_path / "cat.duckdb"
    written_at = _limits_seen(monkeypatch, merge_module, "_write_slice")

    def merge(con):
        return merge_staging(con, staged, source_id="bench", window_start=W0, window_end=W1, run_id="run", attempt_id="run")

    with caplog.at_level(logging.WARNING):
        counts = run_write(lambda: connect(db), merge, what="source bench, window w0: merge", log=logging.getLogger("t"))
    retries = [r.getMessage() for r in caplog.records if "ran out of memory at the lower limit" in r.getMessage()]
    assert len(retries) == 1 and retries[0].startswith("source bench, window w0: merge:")
    assert written_at[0] == "3.8 MiB" and written_at[-1] == WHOLE  # the lower limit, then the whole one
    with connect(db) as con:
        assert _limit(con) == WHOLE
        stored, history = (con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("records", "record_history"))
    assert (counts.created, stored, history) == (5_000, 5_000, 5_000)  # the failed attempt left nothing

    # From then on this process writes at the whole limit.
    written_at.clear()
    again = build_staging(tmp_path / "window2.stage", 5_000, 10_000, version=0)
    counts = run_write(lambda: connect(db), lambda con: merge_staging(
        con, again, source_id="bench", window_start=W0, window_end=W1, run_id="run2", attempt_id="run2"),
        what="again", log=logging.getLogger("t"))
    assert counts.created == 5_000 and set(written_at) == {WHOLE}


def test_a_write_worth_retrying_runs_again_once_then_its_error_stands(tmp_path):
    from harvest_pipeline.store.backend import WriteWorthRetrying, run_write

    attempts = []

    def body(con):
        attempts.append(con.execute("SELECT count(*) FROM records").fetchone()[0])
        con.execute("CREATE TABLE scratch AS SELECT 1 AS x")  # rolled back each time
        try:
            raise duckdb.OutOfMemoryException("out of memory, again")
        except duckdb.OutOfMemoryException as exc:
            raise WriteWorthRetrying("worth one more try") from exc

    with pytest.raises(duckdb.OutOfMemoryException, match="out of memory, again"):
        run_write(lambda: connect(tmp_path / "cat.duckdb"), body, what="w")
    assert attempts == [0, 0]
    with connect(tmp_path / "cat.duckdb") as con:
        assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'scratch'").fetchone()[0]
