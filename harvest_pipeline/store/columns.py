"""The record's columns, declared once: every list, the Arrow schema and the DDL derive from here.

``RECORD_COLUMNS`` is the `records` table, in table order. A staged page carries the columns that
have an Arrow type (plus ``PAGE_ONLY_COLUMNS``); the merge compares and writes the value columns;
a tombstone drops the value columns marked ``dropped_by_tombstone``; the `catalog` view (and so the
Parquet exports) and `harvest-pipeline show` read the columns marked for them.

A new column: append it here with ``added_in`` set to a new migration number, and add that
migration to :data:`harvest_pipeline.store.schema.MIGRATIONS` as ``add_record_columns_sql(n)``.
Migration 1 creates the columns with ``added_in=1``, so it stays what it always was.
"""

from __future__ import annotations

from dataclasses import dataclass

# Arrow types by name: pyarrow is imported when a page's schema is first needed, not by every
# process that only needs the column lists (loading the Dagster definitions, the sensor).
_TEXT = "string"
_TEXTS = "list<string>"
_ARROW_TYPES = {
    "string": lambda pa: pa.string(),
    "list<string>": lambda pa: pa.list_(pa.string()),
    "timestamp[us]": lambda pa: "timestamp[us]",
    "bool": lambda pa: "bool",
    "float64": lambda pa: "float64",
    "int32": lambda pa: "int32",
}


@dataclass(frozen=True)
class Column:
    name: str
    sql: str  # DuckDB type
    arrow: str | None = None  # its Arrow type (a name of _ARROW_TYPES) in a staged page; None: the catalogue fills it
    not_null: bool = False
    value: bool = False  # a version's content: compared, upserted, staged
    normalized: bool = False  # one of NormalizedRecord.to_row()'s keys, filled by the mappers
    dropped_by_tombstone: bool = False  # a deletion sets it to NULL
    catalog: bool = True  # in the `catalog` view and the Parquet exports (live records only)
    shown: bool = True  # in `record_state` (harvest-pipeline show); False for raw XML
    added_in: int = 1  # the migration that created it
    doc: str = ""  # why it is there, when the name does not say (a comment in the DDL)
    compression: str = ""  # a fixed compression clause for the embedded file (see RAW_XML_COMPRESSION)

    @property
    def definition(self) -> str:
        """Its type in DDL: the DuckDB type, and the compression clause if it has one."""
        return f"{self.sql} {self.compression}" if self.compression else self.sql


# Raw XML is stored with a fixed compression, not with what DuckDB would pick per row group: to
# pick, it analyses every method, and the dictionary's analysis keeps a copy of each distinct string
# of the row group (16,384 records' XML, all distinct) only to lose. That copy was about 30 MB of a
# large window's peak RSS (bench --rss, bench/ROUNDS.md "Twenty-fifth round"). zstd, not FSST: a
# catalogue 3.7x smaller, a first harvest 2-9% faster and 5-7 MB lower ("Twenty-eighth round").
# zstd needs DuckDB's storage format v1.2 or later, which store/connection.py opens the catalogue
# with; a file in an older format (opened by plain duckdb.connect) gets FSST instead (schema.py),
# since DuckDB would store the column uncompressed. The shared catalogues (PostgreSQL, DuckLake)
# store it their own way: backend.ddl_for drops the clause.
RAW_XML_COMPRESSION = "USING COMPRESSION zstd"
RAW_XML_COMPRESSION_OLD_FORMAT = "USING COMPRESSION fsst"


def _normalized(name: str, sql: str, arrow: str) -> Column:
    return Column(name, sql, arrow, value=True, normalized=True, dropped_by_tombstone=True)


RECORD_COLUMNS: tuple[Column, ...] = (
    Column("source_id", "VARCHAR", not_null=True),
    Column("identifier", "VARCHAR", _TEXT, not_null=True),
    Column("datestamp", "TIMESTAMP", "timestamp[us]", value=True, doc="the server's datestamp, parsed to UTC"),
    Column("datestamp_raw", "VARCHAR", _TEXT, value=True, doc="as the server wrote it"),
    Column("deleted", "BOOLEAN", "bool", not_null=True, value=True, catalog=False),
    Column("set_specs", "VARCHAR[]", _TEXTS, value=True),
    Column("metadata_prefix", "VARCHAR", _TEXT, value=True),
    Column("metadata_xml", "VARCHAR", _TEXT, value=True, dropped_by_tombstone=True, catalog=False, shown=False,
           doc="raw metadata; NULL for tombstones", compression=RAW_XML_COMPRESSION),
    Column("content_hash", "VARCHAR", _TEXT, value=True, catalog=False),
    _normalized("format_name", "VARCHAR", _TEXT),
    _normalized("title", "VARCHAR", _TEXT),
    _normalized("creators", "VARCHAR[]", _TEXTS),
    _normalized("subjects", "VARCHAR[]", _TEXTS),
    _normalized("description", "VARCHAR", _TEXT),
    _normalized("date", "VARCHAR", _TEXT),
    _normalized("type", "VARCHAR", _TEXT),
    _normalized("language", "VARCHAR", _TEXT),
    _normalized("identifiers", "VARCHAR[]", _TEXTS),
    _normalized("doi", "VARCHAR", _TEXT),
    _normalized("url", "VARCHAR", _TEXT),
    _normalized("rights", "VARCHAR[]", _TEXTS),
    _normalized("bbox_west", "DOUBLE", "float64"),
    _normalized("bbox_south", "DOUBLE", "float64"),
    _normalized("bbox_east", "DOUBLE", "float64"),
    _normalized("bbox_north", "DOUBLE", "float64"),
    Column("mapping_error", "VARCHAR", _TEXT, value=True, dropped_by_tombstone=True),
    Column("first_seen_at", "TIMESTAMP", not_null=True),
    Column("written_at", "TIMESTAMP", not_null=True, doc="when a harvest last changed this row"),
    Column("written_by_run", "VARCHAR"),
    Column("window_start", "TIMESTAMP", doc="the window whose harvest last changed it"),
    Column("window_end", "TIMESTAMP"),
    Column("identifier_key", "BIGINT", catalog=False, shown=False, added_in=4,
           doc="identifier_key_sql(identifier): the narrow column a merge finds its window's rows by"),
)


def identifier_key_sql(expr: str) -> str:
    """63 bits of the identifier's md5, as a BIGINT: PostgreSQL (the shared catalogue) has no
    unsigned type. Equal keys may still differ in identifier: joins also compare identifiers."""
    return f"(md5_number_lower({expr}) >> 1)::BIGINT"
RECORD_KEY = ("source_id", "identifier")

# Columns of a staged page that are not the record's: where in the traversal it came, and whether
# its datestamp lies inside the requested window.
PAGE_ONLY_COLUMNS: tuple[Column, ...] = (
    Column("page_number", "INTEGER", "int32"),
    Column("seq", "INTEGER", "int32"),
    Column("in_window", "BOOLEAN", "bool"),
)

VALUE_COLUMNS: tuple[str, ...] = tuple(c.name for c in RECORD_COLUMNS if c.value)
DROPPED_BY_TOMBSTONE: tuple[str, ...] = tuple(c.name for c in RECORD_COLUMNS if c.dropped_by_tombstone)
NORMALIZED_COLUMNS: tuple[str, ...] = tuple(c.name for c in RECORD_COLUMNS if c.normalized)
CATALOG_COLUMNS: tuple[str, ...] = tuple(c.name for c in RECORD_COLUMNS if c.catalog)
STATE_COLUMNS: tuple[str, ...] = tuple(c.name for c in RECORD_COLUMNS if c.shown)
# What a live record shows and a tombstone lacks: the mapped fields, or why mapping failed.
DESCRIPTIVE_COLUMNS: tuple[str, ...] = tuple(c.name for c in RECORD_COLUMNS if c.shown and c.dropped_by_tombstone)

PAGE_COLUMN_DEFS: tuple[Column, ...] = PAGE_ONLY_COLUMNS + tuple(c for c in RECORD_COLUMNS if c.arrow is not None)
PAGE_COLUMNS: tuple[str, ...] = tuple(c.name for c in PAGE_COLUMN_DEFS)


def _definitions(columns, *, constraints: bool = True, extra: tuple[str, ...] = ()) -> str:
    """Column definitions, one a line; a doc becomes a comment after the line's comma."""
    items = [(f"{c.name} {c.definition}" + (" NOT NULL" if constraints and c.not_null else ""), c.doc) for c in columns]
    items += [(e, "") for e in extra]
    lines = []
    for i, (definition, doc) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        lines.append(f"    {definition}{comma}" + (f"  -- {doc}" if doc else ""))
    return "\n".join(lines)


def create_records_sql() -> str:
    """The `records` table as migration 1 created it (the columns with ``added_in=1``)."""
    first = [c for c in RECORD_COLUMNS if c.added_in == 1]
    key = "PRIMARY KEY (" + ", ".join(RECORD_KEY) + ")"
    return f"CREATE TABLE records (\n{_definitions(first, extra=(key,))}\n);\n"


def rebuild_records_without_key_sql(migration: int) -> str:
    """`records` copied into a table without its PRIMARY KEY, as of `migration` (the columns added
    up to it, NOT NULL kept), which then takes its name."""
    columns = [c for c in RECORD_COLUMNS if c.added_in <= migration]
    names = ", ".join(c.name for c in columns)
    return (
        f"CREATE TABLE records_rebuilt (\n{_definitions(columns)}\n);\n"
        f"INSERT INTO records_rebuilt ({names}) SELECT {names} FROM records;\n"
        "DROP TABLE records;\n"
        "ALTER TABLE records_rebuilt RENAME TO records;\n"
    )


def add_record_columns_sql(migration: int) -> str:
    """ALTER TABLE statements for the columns a later migration adds (nullable, no default)."""
    return "".join(
        f"ALTER TABLE records ADD COLUMN {c.name} {c.definition};\n" for c in RECORD_COLUMNS if c.added_in == migration
    )


def __getattr__(name: str):
    if name == "PAGE_SCHEMA":  # the staged page's Arrow schema, built on first use
        import pyarrow as pa

        schema = pa.schema([(c.name, _ARROW_TYPES[c.arrow](pa)) for c in PAGE_COLUMN_DEFS])
        globals()["PAGE_SCHEMA"] = schema
        return schema
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
