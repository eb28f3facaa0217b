"""Where a source's partitions begin: its `start`, else Identify's earliestDatestamp (cached).

Definitions load in the UI's code server, so a slow or dead server must not block or break the
whole code location: Identify gets a short timeout, its answer is cached next to the catalogue,
and without either the source falls back to a recent start and says so in its asset description.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import datetime, timedelta, timezone
from pathlib import Path

from harvest_pipeline.dates import parse_datestamp
from harvest_pipeline.harvest.listers import lister_for
from harvest_pipeline.http.redaction import redact_text
from harvest_pipeline.sources import SourceConfig

log = logging.getLogger(__name__)
FALLBACK_DAYS = 30


def _cache_file(db_path: Path) -> Path:
    return Path(db_path).parent / "identify_cache.json"


def _read_cache(db_path: Path) -> dict:
    try:
        return json.loads(_cache_file(db_path).read_text())
    except (OSError, ValueError):
        return {}


def _cache_key(source: SourceConfig) -> str:
    """The source's id and a digest of its URL: the file never holds a key the URL carries."""
    return f"{source.id}|{hashlib.sha256(source.url.encode()).hexdigest()[:16]}"


def resolve_start(source: SourceConfig, db_path: Path, *, timeout: float = 5.0) -> tuple[datetime, str]:
    """Return (start, how it was found) for the source's partitions definition."""
    if source.start is not None:
        return source.start, "configured start"
    cache = _read_cache(db_path)
    key = _cache_key(source)
    try:
        quick = source.model_copy(
            update={"http": source.http.model_copy(update={
                "timeout_seconds": timeout, "request_deadline_seconds": timeout, "max_retries": 0})}
        )
        said = lister_for(quick).describe().get("earliest_datestamp")
        if not said:
            raise ValueError("the server does not say when its records begin")
        earliest = parse_datestamp(said)
        cache[key] = said
        try:
            _cache_file(db_path).parent.mkdir(parents=True, exist_ok=True)
            _cache_file(db_path).write_text(json.dumps(cache, indent=1, sort_keys=True))
        except OSError:
            pass
        return earliest, "Identify earliestDatestamp"
    except Exception as exc:  # noqa: BLE001 - any failure falls back, loudly
        if key in cache:
            return parse_datestamp(cache[key]), "cached Identify earliestDatestamp (server unreachable now)"
        fallback = datetime.now(timezone.utc) - timedelta(days=FALLBACK_DAYS)
        said = redact_text(exc)  # the description and the log are stored facts: no secret in them
        log.warning("source %s: Identify failed (%s); partitions start %s days ago until it answers", source.id, said, FALLBACK_DAYS)
        return fallback, f"FALLBACK: Identify failed ({said}); set `start:` in the sources file"
