"""The record's one column declaration against the tables it produces and the mappers' keys."""

from __future__ import annotations

from datetime import datetime, timezone

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq

from harvest_pipeline.formats import ROW_KEYS
from harvest_pipeline.store import ensure_schema
from harvest_pipeline.store.columns import (
    NORMALIZED_COLUMNS,
    PAGE_COLUMNS,
    PAGE_SCHEMA,
    RECORD_COLUMNS,
)
from harvest_pipeline.store.merge import merge_staging
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
