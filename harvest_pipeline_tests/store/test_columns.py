"""The record's one column declaration against the tables it produces and the mappers' keys."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from harvest_pipeline.formats import ROW_KEYS
from harvest_pipeline.store import ensure_schema
from harvest_pipeline.store.backend import DUCKLAKE, EMBEDDED, POSTGRES, ddl_for
from harvest_pipeline.store.columns import (
    NORMALIZED_COLUMNS,
    PAGE_COLUMNS,
    PAGE_SCHEMA,
    RAW_XML_COMPRESSION,
    RECORD_COLUMNS,
)
from harvest_pipeline.store.connection import CATALOGUE_STORAGE_VERSION, close_catalogue, open_catalogue
from harvest_pipeline.store.merge import merge_staging
from harvest_pipeline.store.schema import MIGRATIONS
from harvest_pipeline.store.staging import StagingWindow, staged_datasets


def test_the_migrated_records_table_is_the_declaration():
    con = duckdb.connect()
    ensure_schema(con)
    table = con.execute(
        "SELECT column_name, data_type, is_nullable FROM information_schema.columns"
        " WHERE table_name = 'records' ORDER BY ordinal_position"
    ).fetchall()
    declared = [(c.name, c.sql, "NO" if c.not_null else "YES") for c in RECORD_COLUMNS]
    assert table == declared


def test_a_staged_page_file_is_the_page_declaration(tmp_path):
    row = {c: [None] for c in PAGE_COLUMNS}
    row.update(page_number=[1], seq=[0], identifier=["id-1"], deleted=[False], in_window=[True])
    with StagingWindow(tmp_path / "w.stage") as staging:
        staging.start_attempt("run", "key")
        staging.write_page(pa.table(row, schema=PAGE_SCHEMA), next_token=None, complete_list_size=1,
                           response_date=None, warnings=[])
    [page_file] = (tmp_path / "w.stage").glob("rows-[0-9]*.parquet")
    names = pq.read_schema(page_file).names
    assert names == list(PAGE_COLUMNS) == PAGE_SCHEMA.names


def test_every_mapper_key_but_dates_is_a_normalized_column():
    assert set(NORMALIZED_COLUMNS) == set(ROW_KEYS) - {"dates"}


def test_a_page_in_another_column_order_is_staged_and_merged_by_name(tmp_path):
    """Rows built by another version (or by hand) in another column order are staged by name."""
    old_order = ["page_number", "seq", "identifier", "datestamp", "datestamp_raw", "deleted", "in_window"]
    path = tmp_path / "w.stage"

    row = {c: [None] for c in PAGE_COLUMNS}
    row.update(page_number=[1], seq=[0], identifier=["id-1"], datestamp=[datetime(2026, 1, 1)],
               datestamp_raw=["2026-01-01"], deleted=[False], in_window=[True], set_specs=[[]],
               metadata_prefix=["oai_dc"], metadata_xml=["<x/>"], content_hash=["h"], title=["T"])
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        reordered = pa.table(row, schema=PAGE_SCHEMA).select(old_order + [c for c in PAGE_COLUMNS if c not in old_order])
        assert reordered.schema.names != PAGE_SCHEMA.names
        staging.write_page(reordered, next_token=None, complete_list_size=1, response_date=None, warnings=[])
    stored = staged_datasets(path)[0].to_table(columns=["identifier", "in_window", "title"]).to_pylist()
    assert stored == [{"identifier": "id-1", "in_window": True, "title": "T"}]

    catalogue = duckdb.connect(str(tmp_path / "harvest.duckdb"))
    ensure_schema(catalogue)
    catalogue.execute("BEGIN TRANSACTION")
    counts = merge_staging(catalogue, path, source_id="s", window_start=datetime(2026, 1, 1, tzinfo=timezone.utc),
                           window_end=datetime(2026, 1, 2, tzinfo=timezone.utc), run_id="run", attempt_id="run")
    catalogue.execute("COMMIT")
    assert counts.created == 1
    assert catalogue.execute("SELECT title FROM records").fetchall() == [("T",)]


def _merge_three_records(catalogue, tmp_path):
    path = tmp_path / "w.stage"
    rows = {c: [None] * 3 for c in PAGE_COLUMNS}
    rows.update(page_number=[1] * 3, seq=[0, 1, 2], identifier=[f"id-{i}" for i in range(3)],
                datestamp=[datetime(2026, 1, 1)] * 3, datestamp_raw=["2026-01-01"] * 3, deleted=[False] * 3,
                in_window=[True] * 3, set_specs=[[]] * 3, metadata_prefix=["oai_dc"] * 3,
                metadata_xml=[f"<dc><title>record {i}</title></dc>" for i in range(3)],
                content_hash=[f"h{i}" for i in range(3)])
    with StagingWindow(path) as staging:
        staging.start_attempt("run", "key")
        staging.write_page(pa.table(rows, schema=PAGE_SCHEMA), next_token=None, complete_list_size=3,
                           response_date=None, warnings=[])
    ensure_schema(catalogue)
    catalogue.execute("BEGIN TRANSACTION")
    counts = merge_staging(catalogue, path, source_id="s", window_start=datetime(2026, 1, 1, tzinfo=timezone.utc),
                           window_end=datetime(2026, 1, 2, tzinfo=timezone.utc), run_id="run", attempt_id="run")
    catalogue.execute("COMMIT")
    catalogue.execute("CHECKPOINT")
    assert counts.created == 3


def _compressions(catalogue, table: str, column: str) -> set[str]:
    return {row[0] for row in catalogue.execute(
        f"SELECT compression FROM pragma_storage_info('{table}')"
        f" WHERE column_name = '{column}' AND segment_type = 'VARCHAR'").fetchall()}


def test_raw_xml_is_stored_with_zstd_in_the_embedded_file_and_plain_in_a_shared_catalogue(tmp_path):
    """DuckDB's per-row-group choice would analyse (and copy) the XML for a dictionary it never
    picks; the embedded file's records and history fix zstd, the shared backends get no clause."""
    catalogue = open_catalogue(tmp_path / "harvest.duckdb")
    try:
        _merge_three_records(catalogue, tmp_path)
        assert catalogue.execute(
            "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()[0].startswith(CATALOGUE_STORAGE_VERSION)
        for table in ("records", "record_history"):
            assert _compressions(catalogue, table, "metadata_xml") == {"ZSTD"}, table
            # A column of short repeated strings keeps DuckDB's own choice.
            assert not _compressions(catalogue, table, "source_id") & {"ZSTD", "FSST"}, table
    finally:
        close_catalogue(tmp_path / "harvest.duckdb", catalogue)


def test_a_file_in_an_older_storage_format_stores_raw_xml_with_fsst_not_uncompressed(tmp_path):
    """zstd needs DuckDB's storage format v1.2; a file created by a plain duckdb.connect is older,
    where DuckDB would silently store the column uncompressed, so the schema falls back to FSST."""
    path = tmp_path / "plain.duckdb"
    catalogue = duckdb.connect(str(path))
    _merge_three_records(catalogue, tmp_path)
    for table in ("records", "record_history"):
        assert _compressions(catalogue, table, "metadata_xml") == {"FSST"}, table
    catalogue.close()
    # Opened the harvester's way, the older file is taken into the newer format, its rows intact.
    catalogue = open_catalogue(path)
    try:
        assert catalogue.execute(
            "SELECT tags['storage_version'] FROM duckdb_databases() WHERE database_name = current_database()"
        ).fetchone()[0].startswith(CATALOGUE_STORAGE_VERSION)
        assert catalogue.execute("SELECT count(*) FROM records WHERE metadata_xml LIKE '<dc>%'").fetchone()[0] == 3
    finally:
        close_catalogue(path, catalogue)


def test_the_raw_xml_clause_is_the_embedded_files_only():
    create = MIGRATIONS[0][1]
    assert RAW_XML_COMPRESSION in ddl_for(EMBEDDED, create)
    for shared in (POSTGRES, DUCKLAKE):
        shared_ddl = ddl_for(shared, create)
        assert "COMPRESSION" not in shared_ddl.upper()
        assert "metadata_xml  VARCHAR,  -- kept only" in shared_ddl
