"""The staging folder of a window: committed pages and their cursor survive any crash; what the
cursor does not count is dropped; a torn cursor or an earlier version's file starts the window over."""

from datetime import datetime

import duckdb
import pytest

from harvest_pipeline.errors import WindowBusyError
from harvest_pipeline.store import staging as staging_module
from harvest_pipeline.store.staging import (
    StagingWindow, open_staging_files, staged_datasets, staging_path, staging_window_start,
)
from harvest_pipeline.store.window_parts import part_staging_path


def _page(page_number: int, identifiers: list[str], in_window: bool = True):
    import pyarrow as pa

    from harvest_pipeline.store.columns import PAGE_SCHEMA

    cols = {f.name: [None] * len(identifiers) for f in PAGE_SCHEMA}
    cols["page_number"] = [page_number] * len(identifiers)
    cols["seq"] = list(range(len(identifiers)))
    cols["identifier"] = identifiers
    cols["deleted"] = [False] * len(identifiers)
    cols["in_window"] = [in_window] * len(identifiers)
    return pa.table(cols, schema=PAGE_SCHEMA)


def _staged_identifiers(path) -> list[str]:
    rows, _ = staged_datasets(path)
    table = rows.to_table(columns=["page_number", "seq", "identifier"]).sort_by([("page_number", "ascending"), ("seq", "ascending")])
    return table.column("identifier").to_pylist()


def test_a_torn_cursor_starts_the_window_over(tmp_path):
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        staging.write_page(_page(1, ["a", "b"]), next_token="t1", complete_list_size=None, response_date=None, warnings=[])
    (path / "cursor.json").write_bytes(b'{"format": 1, "attempt_id": "ru')  # what a torn write can leave
    with StagingWindow(path) as staging:
        assert staging.cursor() is None  # a fresh traversal: the window starts from its from-bound
        assert list(path.iterdir()) == []  # the pages it counted are gone with it
        staging.start_attempt("run", "key")
        assert staging.cursor().pages == 0
        assert _staged_identifiers(path) == []


def test_a_cursor_that_counts_a_lost_file_starts_the_window_over(tmp_path):
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        staging.write_page(_page(1, ["a"]), next_token="t1", complete_list_size=None, response_date=None, warnings=[])
        staging.write_page(_page(2, ["b"]), next_token="t2", complete_list_size=None, response_date=None, warnings=[])
    next(path.glob("rows-000001-*.parquet")).unlink()  # an OS crash lost a committed file
    with StagingWindow(path) as staging:
        assert staging.cursor() is None


def test_a_crash_between_the_page_file_and_the_cursor_resumes_after_the_last_committed_page(tmp_path, monkeypatch):
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        staging.write_page(_page(1, ["a", "b"]), next_token="t1", complete_list_size=7, response_date="d1", warnings=[])

        def die(name):  # the process ends here: nothing after it runs
            if name == "mid-page-write":
                raise SystemExit("killed")

        monkeypatch.setattr(staging_module, "crashpoint", die)
        with pytest.raises(SystemExit):
            staging.write_page(_page(2, ["c"]), next_token="t2", complete_list_size=7, response_date="d2", warnings=["w2"])
        monkeypatch.undo()
    assert len(list(path.glob("rows-[0-9]*.parquet"))) == 2  # page 2's rows reached the disk, its cursor did not
    with StagingWindow(path) as staging:
        cursor = staging.cursor()
        assert (cursor.pages, cursor.received, cursor.token, cursor.warnings) == (1, 2, "t1", [])
        assert len(list(path.glob("rows-[0-9]*.parquet"))) == 1  # the file the cursor does not count is gone
        assert _staged_identifiers(path) == ["a", "b"]
        # The page is fetched again and committed under the same commit number.
        staging.write_page(_page(2, ["c"]), next_token=None, complete_list_size=7, response_date="d2", warnings=["w2"])
        cursor = staging.cursor()
        assert (cursor.pages, cursor.received, cursor.closed, cursor.warnings) == (2, 3, True, ["w2"])
    assert _staged_identifiers(path) == ["a", "b", "c"]


def test_a_staging_file_of_an_earlier_version_starts_the_window_over_and_says_so(tmp_path):
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    legacy = path.with_suffix(".duckdb")
    legacy.parent.mkdir(parents=True)
    with duckdb.connect(str(legacy)) as con:  # what the earlier version left mid-window
        con.execute("CREATE TABLE page_records (page_number INTEGER, identifier VARCHAR)")
        con.execute("INSERT INTO page_records VALUES (1, 'a')")
        con.execute("CREATE TABLE window_cursor (id INTEGER, token VARCHAR)")
        con.execute("INSERT INTO window_cursor VALUES (1, 't1')")
    assert open_staging_files(tmp_path / "cat.duckdb") == [legacy]  # listed as interrupted until then
    with StagingWindow(path) as staging:
        assert not legacy.exists()
        assert staging.cursor() is None  # its pages are fetched again
        staging.start_attempt("run", "key")
        [warning] = staging.cursor().warnings
        assert "earlier version" in warning and legacy.name in warning
        staging.write_page(_page(1, ["a"]), next_token=None, complete_list_size=1, response_date=None, warnings=[])
        assert staging.cursor().warnings == [warning]
    assert open_staging_files(tmp_path / "cat.duckdb") == [path]


def test_a_staging_file_of_an_earlier_version_still_harvesting_keeps_the_window_busy(tmp_path):
    import fcntl

    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    legacy = path.with_suffix(".duckdb")
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(b"")
    with open(legacy.with_name(legacy.name + ".lock"), "a+") as held:  # the earlier version's run
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(WindowBusyError):
            StagingWindow(path, wait_seconds=0.2)
    assert legacy.exists()
    with StagingWindow(path, wait_seconds=0.2):  # the lock of the new folder was given back
        assert not legacy.exists()


def test_pages_staged_together_commit_with_the_token_after_the_last_and_are_lost_together(tmp_path):
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        staging.write_page(_page(1, ["a", "b"]), next_token="t1", complete_list_size=None, response_date="d1", warnings=[])
        staging.stage_page(_page(2, ["c"]), next_token="t2", complete_list_size=9, response_date="d2", warnings=["w2"])
        staging.stage_page(_page(3, ["d", "e"]), next_token="t3", complete_list_size=9, response_date="d3", warnings=["w3"])
        assert (staging.pending_pages, staging.pending_rows) == (2, 3)
    # The process ended before the commit: the cursor still follows page 1, as a crash leaves it.
    with StagingWindow(path) as staging:
        cursor = staging.cursor()
        assert (cursor.pages, cursor.received, cursor.token, cursor.complete_list_size) == (1, 2, "t1", None)
        staging.stage_page(_page(2, ["c"]), next_token="t2", complete_list_size=9, response_date="d2", warnings=["w2"])
        staging.stage_page(_page(3, ["d", "e"]), next_token=None, complete_list_size=9, response_date="d3", warnings=["w3"])
        assert staging.commit_pages() == 2
        cursor = staging.cursor()
        assert (cursor.pages, cursor.received, cursor.token, cursor.closed) == (3, 5, None, True)
        assert (cursor.complete_list_size, cursor.response_date, cursor.warnings) == (9, "d1", ["w2", "w3"])
        assert _staged_identifiers(path) == list("abcde")
        assert staging.commit_pages() == 0  # nothing staged: nothing written


def test_the_small_queries_read_the_committed_pages(tmp_path):
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        assert (staging.outside_window_count(), staging.first_identifier()) == (0, None)
        staging.write_page(_page(1, ["b", "a", "b"]), next_token="t1", complete_list_size=None, response_date=None, warnings=[])
        staging.write_page(_page(2, ["a", "c"], in_window=False), next_token=None, complete_list_size=None,
                           response_date=None, warnings=[])
        assert staging.outside_window_count() == 2
        assert staging.first_identifier() == "b"
    with StagingWindow(path) as staging:  # and after a resume
        assert (staging.outside_window_count(), staging.first_identifier()) == (2, "b")


def test_status_lists_window_and_sub_window_folders_by_their_start(tmp_path):
    db = tmp_path / "cat.duckdb"
    whole = staging_path(db, "src", datetime(2026, 10, 1))
    part = part_staging_path(db, "src", datetime(2026, 10, 2), datetime(2026, 10, 2, 12))
    for p in (whole, part):
        StagingWindow(p).release()
    (whole.parent / "reconcile.duckdb").write_bytes(b"")  # not a window's
    assert open_staging_files(db, "src") == [whole, part]
    assert [staging_window_start(p) for p in open_staging_files(db)] == [datetime(2026, 10, 1), datetime(2026, 10, 2)]


def test_a_commit_that_failed_leaves_no_file_for_the_next_commit_to_count(tmp_path, monkeypatch):
    """A commit whose cursor could not be written (a full disk) raises; the pages go again in
    the next commit, under the same number, possibly with other pages: nothing of the failed
    one may be read twice."""
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        staging.write_page(_page(1, ["a", "b"]), next_token="t1", complete_list_size=None, response_date=None, warnings=[])
        real = staging_module._write_cursor

        def full_disk(folder, state):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(staging_module, "_write_cursor", full_disk)
        with pytest.raises(OSError):
            staging.write_page(_page(2, ["c"]), next_token="t2", complete_list_size=None, response_date=None, warnings=[])
        monkeypatch.setattr(staging_module, "_write_cursor", real)
        assert staging.cursor().pages == 1
        staging.stage_page(_page(2, ["c"]), next_token="t2", complete_list_size=None, response_date=None, warnings=[])
        staging.stage_page(_page(3, ["d"]), next_token=None, complete_list_size=None, response_date=None, warnings=[])
        assert staging.commit_pages() == 2
        assert _staged_identifiers(path) == ["a", "b", "c", "d"]
    with StagingWindow(path) as staging:  # and the cursor counts what is there
        assert staging.cursor().pages == 3
    assert _staged_identifiers(path) == ["a", "b", "c", "d"]


def test_a_process_out_of_file_descriptors_is_told_to_raise_its_limit_not_to_delete_the_folder(tmp_path, monkeypatch):
    import errno

    from harvest_pipeline.errors import HarvestError

    path = staging_path(tmp_path / "harvest.duckdb", "demo", datetime(2024, 1, 1))

    def out_of_files(_path):
        raise OSError(errno.EMFILE, "Too many open files", str(_path))

    monkeypatch.setattr(staging_module, "_load_cursor", out_of_files)
    with pytest.raises(HarvestError) as caught:
        StagingWindow(path)
    assert "ulimit -n" in caught.value.hint and "HARVEST_SOURCES_PER_RUN" in caught.value.hint
    assert "delete" not in caught.value.hint
    monkeypatch.undo()
    StagingWindow(path).close()  # the window was not left locked (the next try opens it)
