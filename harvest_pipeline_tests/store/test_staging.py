"""The staging file of a window: a file torn by an OS crash is started over, never a stuck window."""

from datetime import datetime

from harvest_pipeline.store.staging import StagingWindow, staging_path


def test_a_staging_file_that_no_longer_opens_is_started_over(tmp_path):
    path = staging_path(tmp_path / "cat.duckdb", "src", datetime(2026, 10, 1))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"\x00" * 4096 + b"not a duckdb file" * 1000)  # what a torn write can leave
    with StagingWindow(path) as staging:
        assert staging.cursor() is None  # a fresh traversal: the window starts from its from-bound
        staging.start_attempt("run", "key")
        assert staging.cursor().pages == 0


def _page(page_number: int, identifiers: list[str]):
    import pyarrow as pa

    from harvest_pipeline.store.columns import PAGE_SCHEMA

    cols = {f.name: [None] * len(identifiers) for f in PAGE_SCHEMA}
    cols["page_number"] = [page_number] * len(identifiers)
    cols["seq"] = list(range(len(identifiers)))
    cols["identifier"] = identifiers
    cols["deleted"] = [False] * len(identifiers)
    cols["in_window"] = [True] * len(identifiers)
    return pa.table(cols, schema=PAGE_SCHEMA)


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
        assert staging.con.execute("SELECT list(identifier ORDER BY page_number, seq) FROM page_records").fetchone()[0] == list("abcde")
        assert staging.commit_pages() == 0  # nothing staged: nothing written
