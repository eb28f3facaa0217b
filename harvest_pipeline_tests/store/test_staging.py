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
