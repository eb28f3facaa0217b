"""A source's row tally: windows of new records read no history, rows deleted by hand still come back."""

from datetime import timedelta

import pytest

from harvest_pipeline.store import connect
from harvest_pipeline.store.columns import identifier_key_sql
from harvest_pipeline.store.merge_group import merge_staged_windows
from harvest_pipeline_tests.store.test_merge import W0, _first_seen, _merge
from harvest_pipeline_tests.store.test_merge_group import _committed, _stage

T = W0 + timedelta(hours=1)


def _rec(identifier, hours=0):
    return (identifier, T + timedelta(hours=hours), False, f"<x>{identifier} {hours}</x>")


@pytest.fixture
def db(tmp_path):
    return tmp_path / "cat.duckdb"


def _tally_is_the_rows(db, source_id="src"):
    with connect(db) as con:
        written = con.execute("SELECT row_count, key_xor FROM record_tallies WHERE source_id = ?", [source_id]).fetchall()
        now = con.execute("SELECT count(*), coalesce(bit_xor(identifier_key), 0) FROM records WHERE source_id = ?",
                          [source_id]).fetchone()
    return written == [now]


def _removed(db):
    with connect(db) as con:
        return sorted(r[0] for r in con.execute("SELECT identifier FROM records_removed").fetchall())


def _last_action(db, identifier):
    with connect(db) as con:
        return con.execute("SELECT action FROM record_history WHERE identifier = ? ORDER BY received_at DESC LIMIT 1",
                           [identifier]).fetchone()[0]


def test_a_row_deleted_by_hand_windows_ago_comes_back_restored(db):
    _merge(db, [_rec("a"), _rec("b")], run="r1")
    first_seen = _first_seen(db)["a"]
    assert _tally_is_the_rows(db)
    with connect(db) as con:
        con.execute("DELETE FROM records WHERE identifier = 'a'")
    # The next window of new records finds the rows off their tally and lists 'a' as removed ...
    counts, _ = _merge(db, [_rec("c")], run="r2")
    assert counts.created == 1 and _removed(db) == ["a"] and _tally_is_the_rows(db)
    # ... which a later window, whose rows match the tally again, still knows.
    _merge(db, [_rec("d")], run="r3")
    assert _removed(db) == ["a"]
    counts, _ = _merge(db, [_rec("a")], run="r4")
    assert (counts.restored, counts.created) == (1, 0)
    assert _first_seen(db)["a"] == first_seen
    assert _removed(db) == [] and _tally_is_the_rows(db)


def test_a_row_deleted_and_another_inserted_by_hand_leave_the_same_count_and_are_still_seen(db):
    _merge(db, [_rec("a"), _rec("b")], run="r1")
    with connect(db) as con:
        con.execute("DELETE FROM records WHERE identifier = 'a'")
        con.execute(f"INSERT INTO records SELECT * REPLACE ('z' AS identifier, {identifier_key_sql(repr('z'))} AS identifier_key)"
                    " FROM records WHERE identifier = 'b'")
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == 2
    _merge(db, [_rec("c")], run="r2")
    assert _removed(db) == ["a"]
    counts, _ = _merge(db, [_rec("a", hours=1)], run="r3")
    assert (counts.updated, counts.created) == (1, 0)  # a newer version than the one deleted by hand


def test_while_the_rows_match_their_tally_a_new_record_is_not_looked_up_in_the_history(db):
    """What the merge trusts is the list kept with the tally, not the history: a history row
    written behind the merge's back (for an identifier that never had a row) is not read."""
    _merge(db, [_rec("a")], run="r1")
    with connect(db) as con:
        con.execute("INSERT INTO record_history SELECT * REPLACE ('x' AS identifier) FROM record_history WHERE identifier = 'a'")
    counts, _ = _merge(db, [_rec("x")], run="r2")
    assert (counts.created, counts.restored) == (1, 0)
    # The same history read in full (no tally yet: the first merge after an upgrade): 'x' was stored
    # before (at a's version), so this one is an update of it.
    with connect(db) as con:
        con.execute("DELETE FROM records WHERE identifier = 'x'")
        con.execute("DELETE FROM record_history WHERE identifier = 'x' AND run_id = 'r2'")
        con.execute("DELETE FROM record_tallies")
    counts, _ = _merge(db, [_rec("x")], run="r3")
    assert (counts.created, counts.updated) == (0, 1)


def test_a_group_of_windows_keeps_each_sources_tally_and_restores_rows_deleted_by_hand(db):
    for source_id in ("s1", "s2"):
        _committed(db, _stage(db, source_id, [[_rec(f"{source_id}-a"), _rec(f"{source_id}-b")]], "r1").merge_alone)
    with connect(db) as con:
        con.execute("DELETE FROM records WHERE identifier = 's1-a'")
    windows = [_stage(db, "s1", [[_rec("s1-a"), _rec("s1-c")]], "r2"), _stage(db, "s2", [[_rec("s2-c")]], "r2")]
    counts = _committed(db, lambda con: merge_staged_windows(con, windows))
    assert [(c.restored, c.created) for c in counts] == [(1, 1), (0, 1)]
    assert _last_action(db, "s1-a") == "restored"
    assert _tally_is_the_rows(db, "s1") and _tally_is_the_rows(db, "s2") and _removed(db) == []


def test_a_catalogue_from_before_the_tally_is_migrated_and_its_first_merge_reads_the_history(db):
    _merge(db, [_rec("a"), _rec("b")], run="r1")
    with connect(db) as con:  # as the release before migration 8 left it, with a row deleted by hand
        con.execute("DELETE FROM records WHERE identifier = 'a'")
        con.execute("DROP TABLE record_tallies")
        con.execute("DROP TABLE records_removed")
        con.execute("DELETE FROM schema_migrations WHERE version = 8")
    counts, _ = _merge(db, [_rec("a"), _rec("c")], run="r2")
    assert (counts.restored, counts.created) == (1, 1)
    assert _tally_is_the_rows(db) and _removed(db) == []


def test_more_rows_deleted_by_hand_than_a_lookup_list_holds_all_come_back(db, monkeypatch):
    from harvest_pipeline.store import merge, row_tally

    monkeypatch.setattr(merge, "SMALL_LOOKUP", 2)
    monkeypatch.setattr(row_tally, "SMALL_LOOKUP", 2)
    records = [_rec(f"r{n}") for n in range(5)]
    _merge(db, records, run="r1")
    with connect(db) as con:
        con.execute("DELETE FROM records WHERE identifier <> 'r0'")
    _merge(db, [_rec("new")], run="r2")
    assert _removed(db) == ["r1", "r2", "r3", "r4"]
    counts, _ = _merge(db, records, run="r3")
    assert (counts.restored, counts.unchanged, counts.created) == (4, 1, 0)
    assert _removed(db) == [] and _tally_is_the_rows(db)
