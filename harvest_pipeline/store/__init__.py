"""DuckDB storage: the schema and every SQL statement the project runs live in this package."""

from harvest_pipeline.store.connection import connect, default_db_path, transaction
from harvest_pipeline.store.schema import ensure_schema

__all__ = ["connect", "default_db_path", "ensure_schema", "transaction"]
