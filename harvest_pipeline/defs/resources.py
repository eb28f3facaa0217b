"""Resources: the catalogue's DuckDB file (dagster-duckdb's DuckDBResource)."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

from dagster_duckdb import DuckDBResource

from harvest_pipeline.store import default_db_path, ensure_schema
from harvest_pipeline.store.connection import connection_config


def catalogue_resource() -> DuckDBResource:
    # HARVEST_DUCKDB_PATH (default data/harvest.duckdb), resolved once so every run of this
    # code location writes the same file whatever its working directory.
    path = default_db_path().resolve()
    return DuckDBResource(database=str(path), connection_config=connection_config(path))


def catalogue_connector(resource: DuckDBResource):
    """A `connect()` for the harvest core: the resource's connection, with the schema ensured."""

    @contextmanager
    def connect():
        with resource.get_connection() as con:
            ensure_schema(con)
            yield con

    return connect


def catalogue_path(resource: DuckDBResource) -> Path:
    return Path(resource.database)
