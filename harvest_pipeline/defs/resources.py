"""Resources: the catalogue, an embedded DuckDB file (dagster-duckdb's DuckDBResource) or shared.

The shared catalogue (PostgreSQL, or DuckLake) is chosen by the environment, read through
``dg.EnvVar`` so the PostgreSQL connection string never shows in the run's config.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path
from typing import Optional

import dagster as dg
from dagster_duckdb import DuckDBResource
from pydantic import Field

from harvest_pipeline.store import default_db_path
from harvest_pipeline.store.backend import CatalogueSettings, catalogue_settings
from harvest_pipeline.store.connection import close_catalogue, connection_config, open_catalogue
from harvest_pipeline.store.session import process_session
from harvest_pipeline.store.shared_instance import SharedConnect, shared_cursor

_ENV = {"catalogue": "HARVEST_CATALOGUE", "pg_dsn": "HARVEST_CATALOGUE_PG_DSN", "ducklake_data_path": "HARVEST_DUCKLAKE_DATA_PATH"}


class CatalogueResource(DuckDBResource):
    """`database` is the local file (and beside it staging, spill and host locks); with
    `catalogue` postgres or ducklake the records, ledger and state go to the shared catalogue."""

    catalogue: str = "duckdb"
    # Out of repr and str: once a run resolves the EnvVar this is the DSN itself, password included,
    # and a resource's repr shows in tracebacks and failed assertions.
    pg_dsn: Optional[str] = Field(default=None, repr=False)
    ducklake_data_path: Optional[str] = None

    def settings(self) -> CatalogueSettings:
        return catalogue_settings({
            "HARVEST_CATALOGUE": self.catalogue, "HARVEST_CATALOGUE_PG_DSN": self.pg_dsn or "",
            "HARVEST_DUCKLAKE_DATA_PATH": self.ducklake_data_path or "",
        })

    @contextmanager
    def get_connection(self):
        settings = self.settings()
        if not settings.shared:
            # Our own wait for DuckDB's file lock (polls every 20-250 ms, up to 120 s) rather than
            # dagster-duckdb's exponential backoff, whose later retries sleep tens of seconds:
            # with several run processes merging in turn, those sleeps, not the merges, set the pace.
            con = open_catalogue(self.database)  # shared within the process, small row groups
            try:
                yield con
            finally:
                close_catalogue(self.database, con)
            return
        with shared_cursor(settings, self.connection_config) as con:  # the process's one attach
            yield con


def catalogue_resource() -> CatalogueResource:
    # HARVEST_DUCKDB_PATH (default data/harvest.duckdb), resolved once so every run of this
    # code location writes the same file whatever its working directory.
    path = default_db_path().resolve()
    catalogue_settings()  # a wrong HARVEST_CATALOGUE fails here, when the definitions load, clearly
    shared = {field: dg.EnvVar(var) for field, var in _ENV.items() if os.environ.get(var)}
    return CatalogueResource(database=str(path), connection_config=connection_config(path), **shared)


def catalogue_connector(resource: DuckDBResource):
    """A `connect()` for the harvest core: a connection with the schema ensured.

    Embedded file: the process's one catalogue session (store/session.py), which the threads of a
    batch run share one at a time and which stays open while they keep it busy. Shared catalogue:
    a cursor of the process's one attach, its own transaction (store/shared_instance.py)."""
    if isinstance(resource, CatalogueResource):
        settings = resource.settings()
        if settings.shared:  # the schema is ensured when the process attaches
            return SharedConnect.of(settings, resource.connection_config)
    return process_session(resource.database).connection


def catalogue_path(resource: DuckDBResource) -> Path:
    return Path(resource.database)
