"""Merge semantics of a staged window into the catalogue: upsert, tombstone, revive, idempotence."""

from datetime import datetime, timedelta

import pyarrow as pa
import pytest

from harvest_pipeline.harvest.rows import content_hash
from harvest_pipeline.store import connect
from harvest_pipeline.store.merge import merge_staging
from harvest_pipeline.store.columns import PAGE_SCHEMA, identifier_key_sql
from harvest_pipeline.store.staging import StagingWindow, staging_path

W0 = datetime(2026, 10, 1)
W1 = W0 + timedelta(days=1)


def _rows(*recs, page_number=1):
    cols = {f.name: [] for f in PAGE_SCHEMA}
    for seq, (ident, ds, deleted, xml) in enumerate(recs):
        values = dict(
            page_number=page_number, seq=seq, identifier=ident, datestamp=ds, datestamp_raw=ds.isoformat() + "Z",
            deleted=deleted, in_window=True, set_specs=["s"], metadata_prefix="oai_dc",
            metadata_xml=None if deleted else xml, content_hash=content_hash(None if deleted else xml, ("s",), deleted),
            title=None if deleted else f"title of {ident}",
        )
        for name in cols:
            cols[name].append(values.get(name))
    return pa.table(cols, schema=PAGE_SCHEMA)


def _merge(db, recs, run="run"):
    path = staging_path(db, "src", W0)
    st = StagingWindow(path)
    st.start_attempt(run, "k")
    st.write_page(_rows(*recs), next_token=None, complete_list_size=None, response_date=None, warnings=[])
    st.close()
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        counts = merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id=run, attempt_id=run)
        con.execute("COMMIT")
        table = con.execute("SELECT * EXCLUDE (written_at, first_seen_at) FROM records ORDER BY identifier").fetchall()
    st.remove()
    return counts, table


@pytest.fixture
def db(tmp_path):
    return tmp_path / "cat.duckdb"


def test_upsert_is_idempotent(db):
    t = W0 + timedelta(hours=1)
    recs = [("a", t, False, "<x>a</x>"), ("b", t, False, "<x>b</x>")]
    first, table1 = _merge(db, recs, run="r1")
    assert (first.created, first.unchanged, first.stored) == (2, 0, 2)
    again, table2 = _merge(db, recs, run="r2")
    assert (again.created, again.updated, again.unchanged, again.upserted) == (0, 0, 2, 0)
    assert table1 == table2  # not even written_by_run changes


def test_tombstone_drops_metadata_and_live_version_revives(db):
    t = W0 + timedelta(hours=1)
    _merge(db, [("a", t, False, "<x>a</x>")])
    counts, table = _merge(db, [("a", t + timedelta(hours=1), True, None)])
    assert counts.deleted == 1
    with connect(db) as con:
        deleted, xml, title = con.execute("SELECT deleted, metadata_xml, title FROM records").fetchone()
    assert (deleted, xml, title) == (True, None, None)
    counts, _ = _merge(db, [("a", t + timedelta(hours=2), False, "<x>a2</x>")])
    assert counts.revived == 1 and counts.upserted == 1
    with connect(db) as con:
        assert con.execute("SELECT deleted, metadata_xml FROM records").fetchone() == (False, "<x>a2</x>")
        actions = [r[0] for r in con.execute("SELECT action FROM record_history ORDER BY received_at, datestamp").fetchall()]
    assert actions == ["created", "deleted", "revived"]


def test_older_version_never_overwrites_newer(db):
    t = W0 + timedelta(hours=5)
    _merge(db, [("a", t, False, "<x>new</x>")])
    counts, _ = _merge(db, [("a", t - timedelta(hours=3), False, "<x>old</x>")])
    assert counts.stale == 1 and counts.upserted == 0
    with connect(db) as con:
        assert con.execute("SELECT metadata_xml FROM records").fetchone() == ("<x>new</x>",)


def test_duplicate_listing_in_one_window_counts_once(db):
    t = W0 + timedelta(hours=1)
    counts, table = _merge(db, [("a", t, False, "<x>1</x>"), ("a", t, False, "<x>1</x>")])
    assert counts.received == 2 and counts.distinct_received == 1 and counts.created == 1
    assert len(table) == 1


def test_the_merge_counts_repeated_listings_and_names_them(db, monkeypatch):
    """The duplicates check reads the merge's counts: listings beyond the first of an identifier,
    the first few repeated identifiers by name; a window merged in slices says the same."""
    from harvest_pipeline.store import merge as merge_module

    t = W0 + timedelta(hours=1)
    listed = ["b", "a", "b", "a", "c"]
    counts, _ = _merge(db, [(i, t, False, f"<x>{i}</x>") for i in listed])
    assert (counts.duplicates, counts.duplicate_examples) == (2, ("a", "b"))
    monkeypatch.setattr(merge_module, "DUPLICATE_EXAMPLES", 1)
    monkeypatch.setattr(merge_module, "MERGE_SLICE_ROWS", 1)
    counts, _ = _merge(db, [(i, t, False, f"<x>{i}</x>") for i in listed], run="again")
    assert (counts.duplicates, counts.duplicate_examples) == (2, ("a",))
    counts, _ = _merge(db, [("a", t, False, "<x>a</x>")], run="once")
    assert (counts.duplicates, counts.duplicate_examples) == (0, ())


def test_tombstone_for_unknown_record_is_kept_as_deleted_row(db):
    counts, table = _merge(db, [("ghost", W0 + timedelta(hours=1), True, None)])
    assert counts.deleted == 1 and len(table) == 1


def _first_seen(db) -> dict:
    with connect(db) as con:
        return dict(con.execute("SELECT identifier, first_seen_at FROM records").fetchall())


def test_the_harvest_wins_over_local_edits_and_local_deletes(db):
    t = W0 + timedelta(hours=1)
    recs = [("a", t, False, "<x>a</x>"), ("b", t, False, "<x>b</x>"), ("c", t, True, None)]
    _, pristine = _merge(db, recs)
    first_seen = _first_seen(db)
    with connect(db) as con:
        con.execute("UPDATE records SET title = 'edited by hand' WHERE identifier = 'a'")
        con.execute("DELETE FROM records WHERE identifier IN ('b', 'c')")
    counts, table = _merge(db, recs, run="run")
    # A row deleted by hand is put back as it was: restored, not created, first seen unchanged.
    assert (counts.restored, counts.created, counts.deleted, counts.unchanged) == (3, 0, 0, 0)
    assert table == pristine
    assert _first_seen(db) == first_seen
    with connect(db) as con:
        actions = con.execute(
            "SELECT identifier, action FROM record_history"
            " WHERE received_at = (SELECT max(received_at) FROM record_history) ORDER BY identifier"
        ).fetchall()
    assert actions == [("a", "restored"), ("b", "restored"), ("c", "restored")]


def test_a_row_deleted_by_hand_comes_back_at_a_newer_version_as_updated(db):
    t = W0 + timedelta(hours=1)
    _merge(db, [("a", t, False, "<x>a</x>")], run="r1")
    first_seen = _first_seen(db)
    with connect(db) as con:
        con.execute("DELETE FROM records WHERE identifier = 'a'")
    counts, _ = _merge(db, [("a", t + timedelta(hours=1), False, "<x>a2</x>")], run="r2")
    assert (counts.updated, counts.created, counts.restored) == (1, 0, 0)
    assert _first_seen(db) == first_seen


def test_threads_of_one_process_migrate_a_new_catalogue_once(db):
    """The daemon's sensor threads open a fresh catalogue at the same moment."""
    import threading

    errors = []

    def open_it():
        try:
            with connect(db):
                pass
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with connect(db) as con:
        # Each migration applied exactly once (numbers may have gaps while branches are merged).
        from harvest_pipeline.store.schema import MIGRATIONS

        versions = [r[0] for r in con.execute("SELECT version FROM schema_migrations ORDER BY version").fetchall()]
        assert versions == [number for number, _ in MIGRATIONS]



def test_the_window_finds_its_stored_rows_by_key_also_rows_written_without_one(db):
    """The merge reads the stored rows of its window only (through identifier_key); a row written
    by hand, without a key, is still found: updated, not inserted a second time."""
    t = W0 + timedelta(hours=1)
    _merge(db, [("a", t, False, "<x>a</x>"), ("b", t, False, "<x>b</x>")], run="r1")
    with connect(db) as con:
        keys = con.execute(f"SELECT identifier, identifier_key = {identifier_key_sql('identifier')} FROM records ORDER BY 1").fetchall()
        assert keys == [("a", True), ("b", True)]
        con.execute(
            "INSERT INTO records (source_id, identifier, datestamp, deleted, first_seen_at, written_at)"
            " VALUES ('src', 'c', ?, false, now(), now())",
            [t],
        )
    counts, table = _merge(db, [("c", t + timedelta(hours=1), False, "<x>c2</x>"), ("a", t, False, "<x>a</x>")], run="r2")
    assert (counts.created, counts.updated, counts.unchanged, counts.stored) == (0, 1, 1, 2)
    assert [row[1] for row in table] == ["a", "b", "c"]


def _catalogue_at_version(path, version: int):
    """A catalogue file with the first `version` migrations applied, as an older release left it."""
    import duckdb

    from harvest_pipeline.store.schema import MIGRATIONS

    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMP NOT NULL)")
    for number, sql in MIGRATIONS[:version]:
        con.execute(sql)
        con.execute("INSERT INTO schema_migrations VALUES (?, now())", [number])
    return con


def test_migration_4_gives_rows_stored_before_it_their_key(tmp_path):
    from harvest_pipeline.store.schema import ensure_schema

    con = _catalogue_at_version(tmp_path / "old.duckdb", 3)
    con.execute(
        "INSERT INTO records (source_id, identifier, deleted, first_seen_at, written_at)"
        " VALUES ('src', 'old-1', false, now(), now()), ('src', 'old-2', true, now(), now())"
    )
    assert ensure_schema(con) >= 4
    rows = con.execute(f"SELECT identifier, identifier_key = {identifier_key_sql('identifier')} FROM records ORDER BY 1").fetchall()
    assert rows == [("old-1", True), ("old-2", True)]
    con.close()


def test_migration_6_drops_the_records_key_and_keeps_every_row(tmp_path):
    """An embedded catalogue at version 5 is rebuilt in place: same rows and columns, NOT NULL
    kept, no PRIMARY KEY (its in-memory index grew with the catalogue); merges go on as before."""
    import duckdb

    from harvest_pipeline.store.schema import ensure_schema

    path = tmp_path / "cat.duckdb"
    con = _catalogue_at_version(path, 5)
    con.execute(
        f"INSERT INTO records (source_id, identifier, title, deleted, first_seen_at, written_at, identifier_key)"
        f" SELECT 'src', 'old-' || i, 'title ' || i, i % 2 = 0, now(), now(), {identifier_key_sql(chr(39) + 'old-' + chr(39) + ' || i')}"
        f" FROM range(3) t(i)"
    )
    columns_before = con.execute("SELECT column_name, data_type, is_nullable FROM information_schema.columns"
                                 " WHERE table_name = 'records' ORDER BY ordinal_position").fetchall()
    rows_before = con.execute("SELECT * FROM records ORDER BY identifier").fetchall()
    assert con.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'records'"
                       " AND constraint_type = 'PRIMARY KEY'").fetchone()[0] == 1
    assert ensure_schema(con) >= 6
    assert con.execute("SELECT column_name, data_type, is_nullable FROM information_schema.columns"
                       " WHERE table_name = 'records' ORDER BY ordinal_position").fetchall() == columns_before
    assert con.execute("SELECT * FROM records ORDER BY identifier").fetchall() == rows_before
    assert con.execute("SELECT count(*) FROM duckdb_constraints() WHERE table_name = 'records'"
                       " AND constraint_type = 'PRIMARY KEY'").fetchone()[0] == 0
    with pytest.raises(duckdb.ConstraintException):
        con.execute("INSERT INTO records (source_id, identifier, deleted, first_seen_at, written_at) VALUES ('src', NULL, false, now(), now())")
    con.close()
    t = W0 + timedelta(hours=1)
    counts, table = _merge(path, [("old-1", t, False, "<x>1</x>"), ("new", t, False, "<x>n</x>")])
    counts, table = _merge(path, [("old-1", t, False, "<x>1</x>"), ("new", t, False, "<x>n</x>")], run="again")
    assert (counts.created, counts.updated, counts.unchanged) == (0, 0, 2)
    assert [row[1] for row in table] == ["new", "old-0", "old-1", "old-2"]


def test_a_large_window_is_merged_in_slices_with_the_same_result(db, monkeypatch):
    """Pages are written in slices of MERGE_SLICE_ROWS rows (one transaction): every record is
    stored once, a record listed twice (on two slices) in its last version."""
    from harvest_pipeline.store import merge as merge_module

    monkeypatch.setattr(merge_module, "MERGE_SLICE_ROWS", 2)
    t = W0 + timedelta(hours=1)
    path = staging_path(db, "src", W0)
    st = StagingWindow(path)
    st.start_attempt("run", "k")
    pages = [[("a", t, False, "<x>a</x>"), ("b", t, False, "<x>b</x>")],
             [("c", t, False, "<x>c</x>"), ("a", t + timedelta(hours=1), False, "<x>a2</x>")],
             [("d", t, True, None)]]
    for number, recs in enumerate(pages, 1):
        rows = _rows(*recs)
        rows = rows.set_column(rows.schema.get_field_index("page_number"), "page_number", pa.array([number] * len(recs), pa.int32()))
        st.write_page(rows, next_token=None if number == len(pages) else f"t{number}", complete_list_size=None,
                      response_date=None, warnings=[])
    st.close()
    with connect(db) as con:
        con.execute("BEGIN TRANSACTION")
        counts = merge_staging(con, path, source_id="src", window_start=W0, window_end=W1, run_id="run", attempt_id="run")
        merge_module._expose_staging(con, path)  # the merge hid its staged files when done
        slices = merge_module._page_slices(con)
        con.execute("COMMIT")
        stored = con.execute("SELECT identifier, metadata_xml, deleted FROM records ORDER BY 1").fetchall()
        history = con.execute("SELECT count(*) FROM record_history").fetchone()[0]
    assert slices == [(1, 1), (2, 2), (3, 3)]
    assert (counts.received, counts.distinct_received, counts.created, counts.deleted, counts.stored) == (5, 4, 3, 1, 4)
    assert stored == [("a", "<x>a2</x>", False), ("b", "<x>b</x>", False), ("c", "<x>c</x>", False), ("d", None, True)]
    assert history == 4


def test_records_whose_keys_collide_are_told_apart_or_the_merge_stops(db, monkeypatch):
    """A small window finds its stored rows by identifier_key alone. Identifiers sharing a key
    (forced here: every key is 42) inside the window make it read the stored identifiers; a
    received record whose key is another stored record's fails the merge with nothing written,
    and HARVEST_MERGE_READ_IDENTIFIERS=1 merges it."""
    from harvest_pipeline.errors import HarvestError
    from harvest_pipeline.store import merge as merge_module

    monkeypatch.setattr(merge_module, "identifier_key_sql", lambda expr: f"(42 + 0 * length({expr}))::BIGINT")
    t = W0 + timedelta(hours=1)
    counts, _ = _merge(db, [("a", t, False, "<x>a</x>"), ("b", t, False, "<x>b</x>")], run="r1")
    assert counts.created == 2
    counts, table = _merge(db, [("a", t + timedelta(hours=1), False, "<x>a2</x>"), ("c", t, False, "<x>c</x>")], run="r2")
    assert (counts.created, counts.updated) == (1, 1)
    assert [(row[1], row[7]) for row in table] == [("a", "<x>a2</x>"), ("b", "<x>b</x>"), ("c", "<x>c</x>")]
    counts, table = _merge(db, [("d", t, False, "<x>d</x>")], run="r3")  # three stored rows with its key
    assert counts.created == 1
    assert [row[1] for row in table] == ["a", "b", "c", "d"]
    one = db.with_name("one.duckdb")  # one stored row with the received record's key: not told apart
    _merge(one, [("a", t, False, "<x>a</x>")], run="r1")
    for version in (t + timedelta(hours=2), t, t - timedelta(hours=1)):  # updated, same version, stale
        with pytest.raises(HarvestError, match="share an identifier_key"):
            _merge(one, [("d", version, False, "<x>d</x>")], run="r2")
        with connect(one) as con:
            assert con.execute("SELECT identifier, metadata_xml FROM records").fetchall() == [("a", "<x>a</x>")]
            assert con.execute("SELECT count(*) FROM record_history WHERE run_id = 'r2'").fetchone()[0] == 0
    monkeypatch.setenv(merge_module.READ_IDENTIFIERS_ENV, "1")
    counts, table = _merge(one, [("d", t, False, "<x>d</x>")], run="r3")
    assert counts.created == 1
    assert [row[1] for row in table] == ["a", "d"]


def test_new_versions_spread_over_row_groups_update_exactly_their_rows(db):
    """A small window's UPDATE names its rows' ids (so DuckDB reads only their row groups): new
    versions of records stored in different row groups (16,384 rows each) rewrite those rows and
    no other."""
    t = W0 + timedelta(hours=1)
    stored = [(f"r{n:05d}", t, False, f"<x>{n}</x>") for n in range(40_000)]
    counts, _ = _merge(db, stored, run="r1")
    assert counts.created == 40_000
    picked = ["r00003", "r17000", "r39999"]  # first, second and third row group
    counts, table = _merge(db, [(i, t + timedelta(hours=1), False, f"<x>{i} v2</x>") for i in picked], run="r2")
    assert (counts.updated, counts.created, counts.stored) == (3, 0, 3)
    changed = {row[1]: row[7] for row in table if row[7] != f"<x>{int(row[1][1:])}</x>"}
    assert changed == {i: f"<x>{i} v2</x>" for i in picked}
