"""What a source's server says about itself, kept as state so that loading definitions needs no network.

OAI-PMH Identify (granularity, earliestDatestamp, deletedRecord) and, for CSW, what
GetCapabilities and the earliest-record query say (granularity is always seconds, the page cap,
no tombstones). The facts are learned by an explicit refresh (`harvest-pipeline facts`, the
`server_facts_refresh` job and its schedule, `harvest-pipeline dev` before Dagster starts) or by
a source's first harvest, and read at every definitions load.

Storage: one small JSON file per source, `server_facts/<source_id>.json` beside the catalogue,
written to a temporary file and renamed into place, so a reader never sees half a file and never
waits for the DuckDB lock. The model is Dagster's state-backed definitions (state written by an
explicit refresh, read from storage at load), without its component machinery; README,
"Server facts", says why.

`partitions_start` is pinned: set the first time the server's earliest date is learned, and only
ever moved earlier by a later refresh, so a source's partition keys never disappear between loads.
No credential is ever stored: the URL is redacted and no header or auth value is written.
"""

from __future__ import annotations

import hashlib

import json
import os
import tempfile
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

from harvest_pipeline.dates import parse_datestamp
from harvest_pipeline.sources import SourceConfig

FACTS_DIR = "server_facts"
# Short and without retries: a refresh must not hang on a dead server (the next refresh tries again).
REFRESH_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class ServerFacts:
    source_id: str
    identity: str  # what the facts belong to (URL digest, protocol options); other config = unknown
    granularity: str | None
    earliest_datestamp: str | None
    deleted_record: str | None
    page_cap: int | None  # CSW: the maxRecords cap GetCapabilities advertises
    partitions_start: str | None  # ISO datetime, pinned (see the module docstring)
    learned_at: str
    learned_by: str

    def partitions_start_datetime(self) -> datetime | None:
        return datetime.fromisoformat(self.partitions_start) if self.partitions_start else None


def facts_identity(source: SourceConfig) -> str:
    """The settings the facts depend on: a source moved to another URL has unknown facts again."""
    # The URL's digest, not the URL: a secret in it (a key parameter of any name) is never stored.
    parts = [source.protocol, "url-sha256:" + hashlib.sha256(source.url.encode()).hexdigest()[:16]]
    if source.csw is not None:
        parts += [source.csw.type_names, source.csw.output_schema, source.csw.modified_queryable,
                  source.csw.extra_filter or ""]
    return "|".join(parts)


def facts_dir(db_path: str | Path) -> Path:
    return Path(db_path).parent / FACTS_DIR


def facts_path(db_path: str | Path, source_id: str) -> Path:
    return facts_dir(db_path) / f"{source_id}.json"


def read_facts(source: SourceConfig, db_path: str | Path) -> ServerFacts | None:
    """The stored facts of `source`, or None when none are stored (or they belong to other settings)."""
    try:
        raw = json.loads(facts_path(db_path, source.id).read_text(encoding="utf-8"))
        facts = ServerFacts(**{k: raw.get(k) for k in ServerFacts.__dataclass_fields__})
    except (OSError, ValueError, TypeError):
        return None
    return facts if facts.identity == facts_identity(source) else None


def write_facts(db_path: str | Path, facts: ServerFacts) -> Path:
    """Write atomically: a temporary file in the same folder, then rename over the old one."""
    path = facts_path(db_path, facts.source_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{facts.source_id}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(asdict(facts), f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def describe_server(source: SourceConfig, *, timeout: float = REFRESH_TIMEOUT_SECONDS, lister=None) -> dict:
    """Ask the server now (Identify; CSW GetCapabilities + earliest record). Raises HarvestError."""
    from harvest_pipeline.harvest.listers import lister_for

    if lister is None:
        quick = source.model_copy(
            update={"http": source.http.model_copy(update={"timeout_seconds": timeout, "max_retries": 0})}
        )
        lister = lister_for(quick)
    described = dict(lister.describe())
    # CSW: capabilities are cached by describe(), so this asks nothing more.
    caps = lister.capabilities() if hasattr(lister, "capabilities") else None
    described["page_cap"] = getattr(caps, "max_records", None)
    return described


def merge_facts(source: SourceConfig, old: ServerFacts | None, described: dict, *, learned_by: str) -> ServerFacts:
    """New facts from what the server said, keeping the partitions start pinned (never moved later)."""
    start = old.partitions_start_datetime() if old else None
    said = described.get("earliest_datestamp")
    if said:
        try:
            earliest = parse_datestamp(said)
        except ValueError:
            earliest = None
        if earliest is not None and (start is None or earliest < start):
            start = earliest
    return ServerFacts(
        source_id=source.id,
        identity=facts_identity(source),
        granularity=described.get("granularity"),
        earliest_datestamp=said,
        deleted_record=described.get("deleted_record"),
        page_cap=described.get("page_cap"),
        partitions_start=start.astimezone(timezone.utc).isoformat() if start else None,
        learned_at=datetime.now(timezone.utc).replace(microsecond=0).isoformat(),
        learned_by=learned_by,
    )


def shapes_definitions(old: ServerFacts | None, new: ServerFacts) -> bool:
    """Whether loaded definitions built from `old` differ from ones built from `new`."""
    if old is None:
        return True
    return (old.partitions_start, old.deleted_record) != (new.partitions_start, new.deleted_record)


def remember(source: SourceConfig, db_path: str | Path, described: dict, *, learned_by: str) -> tuple[ServerFacts, bool]:
    """Store what the server said; return (facts, whether definitions built from them change)."""
    old = read_facts(source, db_path)
    new = merge_facts(source, old, described, learned_by=learned_by)
    if old is not None and replace(old, learned_at="", learned_by="") == replace(new, learned_at="", learned_by=""):
        return old, False  # nothing new: keep the file (and its date of first learning) as it is
    write_facts(db_path, new)
    return new, shapes_definitions(old, new)


def refresh_facts(source: SourceConfig, db_path: str | Path, *, learned_by: str,
                  timeout: float = REFRESH_TIMEOUT_SECONDS) -> tuple[ServerFacts, bool]:
    """Ask the server and store the answer. Raises HarvestError when the server cannot be asked."""
    return remember(source, db_path, describe_server(source, timeout=timeout), learned_by=learned_by)


def learn_new_source(source_id: str, db_path: str | Path, *, learned_by: str) -> ServerFacts | None:
    """After a source was added to the sources file: store its facts, so its partitions show as
    soon as the code location reloads. None (and the sensor learns them later) if the server
    cannot be asked now."""
    from harvest_pipeline.errors import HarvestError
    from harvest_pipeline.sources import load_sources

    source = next((s for s in load_sources() if s.id == source_id), None)
    if source is None:
        return None
    try:
        return refresh_facts(source, db_path, learned_by=learned_by)[0]
    except HarvestError:
        return None
