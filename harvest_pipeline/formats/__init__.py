"""Metadata mappers: one lxml payload element in, one NormalizedRecord out (no Dagster, lxml only).

    from harvest_pipeline.formats import map_record, MappingError
    record = map_record(oai_record.metadata)   # dispatch on root namespace + local name
    row = record.to_row()                      # flat dict for the DuckDB catalogue

To add a format: write `formats/<name>.py` with a mapper and `REGISTRATIONS`, then add its module
name to MAPPER_MODULES below (see registry.py).
"""

from __future__ import annotations

from importlib import import_module

from .errors import MappingError
from .model import ROW_KEYS, NormalizedRecord
from .registry import (
    RegisteredFormat, format_for_namespace, known_formats, map_record, mapper_for, register, register_module, unregister,
)

# The one registration line per mapper module.
MAPPER_MODULES = ("oai_dc", "datacite", "iso19139", "marcxml", "mods", "arxiv", "doaj", "pos")

for _name in MAPPER_MODULES:
    register_module(import_module(f"{__name__}.{_name}"))
del _name

__all__ = [
    "MAPPER_MODULES",
    "ROW_KEYS",
    "MappingError",
    "NormalizedRecord",
    "RegisteredFormat",
    "format_for_namespace",
    "known_formats",
    "map_record",
    "mapper_for",
    "register",
    "register_module",
    "unregister",
]
