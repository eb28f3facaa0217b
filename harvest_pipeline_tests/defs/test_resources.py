"""The catalogue resource as a run sees it: the shared catalogue's DSN resolved, never shown."""

from __future__ import annotations

import dagster as dg

from harvest_pipeline.defs.resources import CatalogueResource, catalogue_resource

PASSWORD = "s3cret-never-shown"


def test_a_run_resolves_the_dsn_and_its_repr_never_shows_the_password(monkeypatch, tmp_path):
    monkeypatch.setenv("HARVEST_DUCKDB_PATH", str(tmp_path / "harvest.duckdb"))
    monkeypatch.setenv("HARVEST_CATALOGUE", "postgres")
    monkeypatch.setenv("HARVEST_CATALOGUE_PG_DSN", f"postgresql://harvest:{PASSWORD}@127.0.0.1:1/catalogue")
    seen = {}

    @dg.asset
    def look(catalogue: CatalogueResource) -> None:
        # A resource's repr is what a traceback or a failed assertion prints.
        seen.update(repr=repr(catalogue), str=str(catalogue), dsn=catalogue.settings().pg_dsn)

    assert dg.materialize([look], resources={"catalogue": catalogue_resource()}).success
    assert seen["dsn"] and PASSWORD in seen["dsn"]  # resolved: the run can connect
    assert PASSWORD not in seen["repr"] and PASSWORD not in seen["str"]
    assert "CatalogueResource(" in seen["repr"] and "catalogue='postgres'" in seen["repr"]
