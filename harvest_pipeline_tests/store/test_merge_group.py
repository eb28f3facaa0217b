"""Small windows of several sources merged as a group give what merging them one by one gives."""

from datetime import datetime, timedelta

import pytest

from harvest_pipeline.store import connect, merge_group
from harvest_pipeline.store.merge import merge_staging
from harvest_pipeline.store.merge_group import StagedWindow, merge_staged_windows
from harvest_pipeline.store.staging import StagingWindow, staging_path
from harvest_pipeline_tests.store.test_merge import _rows

W0 = datetime(2026, 10, 1)
W1 = W0 + timedelta(days=1)
T = W0 + timedelta(hours=1)


def _stage(db, source_id, pages, run) -> StagedWindow:
    path = staging_path(db, source_id, W0)
    staging = StagingWindow(path)
    staging.start_attempt(run, "k")
    for n, recs in enumerate(pages, 1):
        staging.write_page(_rows(*recs, page_number=n), next_token=None, complete_list_size=None, response_date=None, warnings=[])
    staging.close()
    staging.release()
    return StagedWindow(path, source_id, W0, W1, run, run, received=sum(len(p) for p in pages))


def _x(ident):
    return f"<x>{ident}</x>"


# The windows merged at the end: (source, pages of (identifier, datestamp, deleted, xml)).
SECOND = {
    # every record new, one listed twice (its later listing counts), a tombstone of an unknown record
    "new": [[("n1", T, False, _x("n1")), ("n2", T, False, _x("n2"))], [("n1", T, False, _x("n1b")), ("n3", T, True, None)]],
    # records stored by the first windows: compared with their stored versions, merged alone
    "known": [[("k1", T, False, _x("k1")), ("k2", T + timedelta(hours=1), False, _x("k2 v2")), ("k9", T, False, _x("k9"))]],
    # rows deleted by hand: restored, updated, revived from their history
    "by_hand": [[("h1", T, False, _x("h1")), ("h2", T + timedelta(hours=1), False, _x("h2 v2")), ("h3", T, False, _x("h3"))]],
    "empty": [],
}
FIRST = {
    "known": [[("k1", T, False, _x("k1")), ("k2", T, False, _x("k2"))]],
    "by_hand": [[("h1", T, False, _x("h1")), ("h2", T, False, _x("h2")), ("h3", T - timedelta(hours=1), True, None)]],
}


def _catalogue(db):
    for source_id, pages in FIRST.items():
        window = _stage(db, source_id, pages, "first")
        with connect(db) as con:
            con.execute("BEGIN TRANSACTION")
            window.merge_alone(con)
            con.execute("COMMIT")
    with connect(db) as con:
        con.execute("DELETE FROM records WHERE source_id = 'by_hand'")
    return [_stage(db, source_id, pages, f"second-{source_id}") for source_id, pages in SECOND.items()]


def _state(db):
    with connect(db) as con:
        records = con.execute(
            "SELECT * EXCLUDE (written_at, first_seen_at), first_seen_at = written_at AS first_seen_now"
            " FROM records ORDER BY source_id, identifier").fetchall()
        history = con.execute(
            "SELECT * EXCLUDE (received_at) FROM record_history ORDER BY source_id, identifier, run_id").fetchall()
    return records, history


def _committed(db, merge):
    """merge(con) in one transaction of the catalogue, committed; its result."""
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        result = merge(con)
        con.execute("COMMIT")
    return result


@pytest.fixture
def spy(monkeypatch):
    alone = []
    real = merge_group.merge_staging

    def counting(con, path, **kw):
        alone.append(kw["source_id"])
        return real(con, path, **kw)

    monkeypatch.setattr(merge_group, "merge_staging", counting)
    return alone


def test_a_group_merge_gives_the_rows_history_and_counts_of_single_merges(tmp_path, spy):
    one_by_one, grouped = tmp_path / "single" / "cat.duckdb", tmp_path / "group" / "cat.duckdb"
    one_by_one.parent.mkdir()
    grouped.parent.mkdir()
    single_counts = []
    for window in _catalogue(one_by_one):
        with connect(one_by_one) as con:
            con.execute("BEGIN TRANSACTION")
            single_counts.append(merge_staging(con, window.staging_folder, source_id=window.source_id,
                                               window_start=W0, window_end=W1, run_id=window.run_id,
                                               attempt_id=window.attempt_id))
            con.execute("COMMIT")
    windows = _catalogue(grouped)
    spy.clear()
    group_counts = _committed(grouped, lambda con: merge_staged_windows(con, windows))
    assert spy == ["known"]  # the only window with stored rows went alone; the others as a group
    assert group_counts == single_counts
    assert _state(grouped) == _state(one_by_one)
    by_source = dict(zip(SECOND, group_counts))
    assert (by_source["new"].created, by_source["new"].deleted, by_source["new"].duplicates) == (2, 1, 1)
    assert by_source["new"].duplicate_examples == ("n1",)
    assert (by_source["by_hand"].restored, by_source["by_hand"].updated, by_source["by_hand"].revived) == (1, 1, 1)
    assert (by_source["empty"].received, by_source["empty"].stored) == (0, 0)


def test_a_group_merged_again_finds_every_record_unchanged(tmp_path, spy):
    db = tmp_path / "cat.duckdb"
    windows = [_stage(db, s, [[(f"{s}-{i}", T, False, _x(i)) for i in range(3)]], "r1") for s in ("a", "b", "c")]
    first = _committed(db, lambda con: merge_staged_windows(con, windows))
    assert spy == [] and [c.created for c in first] == [3, 3, 3]
    state = _state(db)[0]
    windows = [_stage(db, s, [[(f"{s}-{i}", T, False, _x(i)) for i in range(3)]], "r2") for s in ("a", "b", "c")]
    again = _committed(db, lambda con: merge_staged_windows(con, windows))
    assert spy == ["a", "b", "c"] and [c.unchanged for c in again] == [3, 3, 3]
    assert _state(db)[0] == state


def test_a_group_holds_one_window_per_source(tmp_path):
    db = tmp_path / "cat.duckdb"
    window = _stage(db, "a", [[("x", T, False, _x("x"))]], "r1")
    with connect(db) as con, pytest.raises(ValueError, match="one window per source"):
        merge_staged_windows(con, [window, window])


def test_each_merge_previews_what_reading_the_catalogue_back_shows(tmp_path, spy):
    """The merge's own preview of the records it wrote (store/merge.py, MergeCounts.changed_preview)
    is what the UI read back from the history and the records before: same rows, same order."""
    from harvest_pipeline.store.preview import changed_records, preview_rows

    db = tmp_path / "cat.duckdb"
    windows = _catalogue(db)
    spy.clear()
    counts = _committed(db, lambda con: merge_staged_windows(con, windows))
    with connect(db) as con:
        read_back = [changed_records(con, w.source_id, W0, W1, attempt_id=w.attempt_id) for w in windows]
    assert spy == ["known"]  # both ways of merging are in the comparison
    for window, c, rows in zip(windows, counts, read_back):
        assert preview_rows(c.changed_preview) == rows, window.source_id
        assert len(c.changed_preview) == c.changed
    by_source = {w.source_id: preview_rows(c.changed_preview) for w, c in zip(windows, counts)}
    assert [(r["identifier"], r["action"], r["title"]) for r in by_source["new"]] == [
        ("n1", "created", "title of n1"), ("n2", "created", "title of n2"), ("n3", "deleted", None)]
    assert [r["identifier"] for r in by_source["known"]] == ["k2", "k9"]  # k1 unchanged: not shown
    assert by_source["empty"] == []


def test_a_large_change_previews_its_newest_records_only(tmp_path):
    from harvest_pipeline.store.merge import PREVIEW_ROWS
    from harvest_pipeline.store.preview import changed_records, preview_rows

    db = tmp_path / "cat.duckdb"
    n = PREVIEW_ROWS + 15
    # r000 a tombstone with the newest datestamp: first in the preview, without a title.
    window = _stage(db, "big", [[(f"r{i:03d}", T + timedelta(minutes=10 if i == 0 else i % 7), i == 0, _x(i))
                                 for i in range(n)]], "r1")
    counts = _committed(db, window.merge_alone)
    with connect(db) as con:
        read_back = changed_records(con, "big", W0, W1, attempt_id="r1", limit=PREVIEW_ROWS)
    assert (counts.created, counts.deleted) == (n - 1, 1) and len(counts.changed_preview) == PREVIEW_ROWS
    assert preview_rows(counts.changed_preview) == read_back
    assert counts.changed_preview[0] == ("r000", T + timedelta(minutes=10), "deleted", None)
    assert counts.changed_preview[1][3] == f"title of {counts.changed_preview[1][0]}"
    stamps = [row[1] for row in counts.changed_preview]
    assert stamps == sorted(stamps, reverse=True) and stamps[1] == T + timedelta(minutes=6)


def test_a_window_merged_again_unchanged_previews_nothing(tmp_path):
    db = tmp_path / "cat.duckdb"
    for run in ("r1", "r2"):
        window = _stage(db, "a", [[("a1", T, False, _x(1)), ("a2", T, False, _x(2))]], run)
        counts = _committed(db, window.merge_alone)
    assert counts.unchanged == 2 and counts.changed_preview == ()
