"""Where a source's partitions begin, from configuration and stored server facts only (no network).

A source's `start` wins. Otherwise the pinned `partitions_start` of its stored server facts
(harvest/server_facts.py). A source whose facts are not known yet gets no closed window at all
(its partitions begin at the current window) and says so in its asset description; its sensor
requests the `server_facts_refresh` job, and the partitions appear when the code location reloads.
"""

from __future__ import annotations

from datetime import datetime, timezone

from harvest_pipeline.defs.partitions import floor_to_window
from harvest_pipeline.harvest.server_facts import ServerFacts
from harvest_pipeline.sources import SourceConfig

UNKNOWN = "UNKNOWN"


def resolve_start(source: SourceConfig, facts: ServerFacts | None) -> tuple[datetime, str]:
    """(start, how it was found). The note starts with UNKNOWN when nothing says where to start."""
    if source.start is not None:
        return source.start, "configured start"
    if facts is not None and facts.partitions_start:
        return facts.partitions_start_datetime(), (
            f"the server's earliest date {facts.earliest_datestamp or facts.partitions_start} "
            f"(server facts learned {facts.learned_at} by {facts.learned_by})"
        )
    # Nothing closed yet: no window is offered until the facts are known.
    placeholder = floor_to_window(datetime.now(timezone.utc), source.window)
    if facts is not None:
        why = "the server does not say when its records begin"
    else:
        why = "the server's facts (Identify / GetCapabilities) are not known yet"
    return placeholder, (
        f"{UNKNOWN}: {why}; no window is offered yet. The sensor requests the job server_facts_refresh "
        "(or run `harvest-pipeline facts`); the partitions appear when the code location reloads. "
        "Or set `start:` in the sources file"
    )


def deleted_record_policy(source: SourceConfig, facts: ServerFacts | None) -> tuple[str | None, str]:
    """(deletedRecord, where it came from), from stored facts only."""
    if source.protocol == "csw":
        return "no", "CSW has no deletion tombstones"
    if facts is not None and facts.deleted_record:
        return facts.deleted_record, f"Identify, learned {facts.learned_at}"
    return None, "unknown until the server's facts are learned"
