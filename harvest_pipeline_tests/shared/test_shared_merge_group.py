"""Small windows of several sources merged as a group into PostgreSQL (store/merge_group.py): what
merging them one by one there gives, with their stored keys and history read on PostgreSQL's
indexes, not by copying the sources' rows."""

from __future__ import annotations

import pytest

from harvest_pipeline.bench.upsert_section import build_big_source
from harvest_pipeline.store.merge import merge_staging
from harvest_pipeline.store.merge_group import merge_staged_windows
from harvest_pipeline.store.shared_instance import close_shared_instances
from harvest_pipeline_tests.shared.test_shared_merge_lookups import _rows_read_by_scans
from harvest_pipeline_tests.store.test_merge_group import (
    SECOND, W0, W1, _catalogue, _committed, _stage, _state, _x, T, spy,  # noqa: F401 - spy is a fixture
)

pytestmark = pytest.mark.shared


def test_a_group_merge_into_postgresql_gives_what_single_merges_give(shared_env, tmp_path, spy):  # noqa: F811
    shared_env("postgres")
    one_by_one = tmp_path / "single" / "cat.duckdb"
    single_counts = []
    for window in _catalogue(one_by_one):
        single_counts.append(_committed(one_by_one, lambda con, w=window: merge_staging(
            con, w.staging_folder, source_id=w.source_id, window_start=W0, window_end=W1, run_id=w.run_id,
            attempt_id=w.attempt_id)))
    single_state = _state(one_by_one)
    close_shared_instances()
    shared_env("postgres")  # a second, empty catalogue
    grouped = tmp_path / "group" / "cat.duckdb"
    windows = _catalogue(grouped)
    spy.clear()
    group_counts = _committed(grouped, lambda con: merge_staged_windows(con, windows))
    assert spy == ["known"]  # the window with stored rows went alone; the others as a group
    assert group_counts == single_counts
    assert _state(grouped) == single_state
    by_source = dict(zip(SECOND, group_counts))
    assert (by_source["new"].created, by_source["new"].deleted, by_source["new"].duplicates) == (2, 1, 1)
    assert (by_source["by_hand"].restored, by_source["by_hand"].updated, by_source["by_hand"].revived) == (1, 1, 1)


def test_a_group_merge_into_postgresql_reads_its_own_keys_not_the_sources(shared_env, tmp_path, spy):  # noqa: F811
    env = shared_env("postgres")
    db = tmp_path / "harvest.duckdb"
    stored = 30_000
    build_big_source(db, stored)  # source 'bench': 30,000 records
    import psycopg

    with psycopg.connect(env["HARVEST_CATALOGUE_PG_DSN"], autocommit=True) as conn:
        conn.execute("INSERT INTO record_history (source_id, identifier, datestamp, deleted, content_hash, action,"
                     " received_at) SELECT source_id, identifier, datestamp, deleted, content_hash, 'created',"
                     " written_at FROM records")
        conn.execute("ANALYZE records")
        conn.execute("ANALYZE record_history")
    before = _rows_read_by_scans(env["HARVEST_CATALOGUE_PG_DSN"])
    # Three sources' new windows, and one of 'bench' itself whose records are all stored already.
    windows = [_stage(db, s, [[(f"{s}-{i}", T, False, _x(i)) for i in range(50)]], "r1") for s in ("a", "b", "c")]
    windows.append(_stage(db, "bench", [[(f"oai:bench.upsert:{i:010d}", T, False, _x(i)) for i in range(3)]], "r1"))
    counts = _committed(db, lambda con: merge_staged_windows(con, windows))
    after = _rows_read_by_scans(env["HARVEST_CATALOGUE_PG_DSN"])
    assert [c.created for c in counts] == [50, 50, 50, 0] and counts[3].updated == 3
    assert spy == ["bench"]  # found stored: compared alone
    read = {t: after.get(t, 0) - before.get(t, 0) for t in ("records", "record_history")}
    assert read["records"] < stored // 10, read
    assert read["record_history"] < stored // 10, read
