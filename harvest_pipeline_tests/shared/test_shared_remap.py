"""A remap on a shared catalogue (PostgreSQL, DuckLake) ends as on the embedded file."""

from __future__ import annotations

import pytest

from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.harvest.remap import remap_source
from harvest_pipeline.store import ledger
from harvest_pipeline_tests.conftest import day_window, demo_source
from harvest_pipeline_tests.harvest.test_remap import _older_oai_dc_mapper, _records

pytestmark = pytest.mark.shared


@pytest.mark.parametrize("kind", ["postgres", "ducklake"])
def test_a_remap_on_a_shared_catalogue_brings_it_to_todays_mappers(kind, shared_demo, tmp_path, monkeypatch, shared_env):
    source = demo_source(shared_demo)
    monkeypatch.delenv("HARVEST_CATALOGUE", raising=False)
    today_db = tmp_path / "today" / "harvest.duckdb"
    assert harvest_window(source, day_window(3), db_path=today_db).status == ledger.VERIFIED
    expected = _records(today_db)

    shared_env(kind)
    shared_db = tmp_path / "worker" / "harvest.duckdb"
    with _older_oai_dc_mapper():
        assert harvest_window(source, day_window(3), db_path=shared_db).status == ledger.VERIFIED
    assert _records(shared_db) != expected
    report = remap_source(source, db_path=shared_db)
    assert report.changed > 0 and report.counts.restored == report.changed and report.now_mapped > 0
    assert _records(shared_db) == expected
    assert remap_source(source, db_path=shared_db).changed == 0
