"""What a server offers, the source entry proposed from it, and a reachability check per source.

Used by `harvest-pipeline sources add|check` and the UI job `register_source`. Nothing here
harvests: Identify, ListMetadataFormats and ListSets (OAI-PMH) or GetCapabilities (CSW) only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from pydantic import ValidationError

from harvest_pipeline.errors import ConfigError, HarvestError
from harvest_pipeline.sources.registry import SourceConfig

ISO_SCHEMA = "http://www.isotc211.org/2005/gmd"
MAX_SETS_LISTED = 1000


@dataclass
class ServerFacts:
    protocol: str
    url: str
    name: str | None = None
    earliest: str | None = None
    granularity: str | None = None
    deleted_record: str | None = None
    formats: list[str] = field(default_factory=list)  # OAI metadata prefixes
    format_namespaces: dict[str, str] = field(default_factory=dict)  # prefix -> metadataNamespace
    sets: list[str] | None = None  # None: not listed (no set asked for, or ListSets failed)
    output_schemas: list[str] = field(default_factory=list)  # CSW
    type_names: list[str] = field(default_factory=list)  # CSW
    page_size_cap: int | None = None  # CSW
    notes: list[str] = field(default_factory=list)


def guess_protocol(url: str) -> str:
    return "csw" if url.rstrip("/").lower().endswith("csw") else "oai-pmh"


def probe_server(url: str, protocol: str, *, timeout: float = 30.0, list_sets: bool = False) -> ServerFacts:
    """Ask the server about itself; raises HarvestError (naming the URL) when it cannot answer."""
    if protocol == "csw":
        from harvest_pipeline.csw.client import CSWClient

        caps = CSWClient(url, timeout=timeout).get_capabilities()
        return ServerFacts(
            protocol, url, name=caps.title, granularity="seconds", deleted_record="no",
            output_schemas=list(caps.output_schemas), type_names=list(caps.type_names),
            page_size_cap=caps.max_records, notes=list(caps.warnings),
        )
    from harvest_pipeline.oai.client import OAIClient

    client = OAIClient(url, timeout=timeout)
    info = client.identify()
    formats = client.list_metadata_formats()
    facts = ServerFacts(
        protocol, url, name=info.repository_name, earliest=info.earliest_datestamp,
        granularity=info.granularity, deleted_record=info.deleted_record,
        formats=[f.prefix for f in formats], format_namespaces={f.prefix: f.namespace for f in formats},
        notes=list(info.warnings),
    )
    if list_sets:
        try:
            facts.sets = [s.spec for s in islice(client.list_sets(), MAX_SETS_LISTED)]
        except HarvestError as exc:  # noSetHierarchy and the like: not fatal for a proposal
            facts.notes.append(f"ListSets: {exc}")
    return facts


def mapping_note(prefix: str, namespaces: dict[str, str]) -> str | None:
    """What to say when no mapper reads the namespace `prefix` is declared with (None when one does)."""
    from harvest_pipeline.formats import format_for_namespace

    namespace = namespaces.get(prefix)
    if not namespace or format_for_namespace(namespace):
        return None
    mapped = [p for p, ns in namespaces.items() if format_for_namespace(ns)]
    return (
        f"metadata_prefix {prefix}: no mapper reads its namespace {namespace}, so its records are stored raw "
        "(quarantine kind map) unless they are plain Dublin Core elements; "
        + (f"formats it offers that are mapped: {', '.join(mapped)} (pass --prefix)" if mapped else
           "it offers no format that is mapped (README \"Adding a format\")")
    )


def propose_entry(
    facts: ServerFacts,
    *,
    source_id: str,
    metadata_prefix: str | None = None,
    set_spec: str | None = None,
    window: str | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """(the sources-file entry, what was decided and why), from what the server said.

    Raises ConfigError when the server does not offer what was asked for.
    """
    why: list[str] = []
    entry: dict[str, Any] = {"id": source_id, "protocol": facts.protocol, "url": facts.url}
    csw: dict[str, Any] = {}
    if facts.protocol == "oai-pmh":
        if metadata_prefix and metadata_prefix not in facts.formats:
            raise ConfigError(
                f"{facts.url} does not offer metadataPrefix {metadata_prefix}",
                source_id=source_id, hint=f"pick one it lists: {', '.join(facts.formats) or '(none listed)'}",
            )
        prefix = metadata_prefix or ("oai_dc" if "oai_dc" in facts.formats or not facts.formats else facts.formats[0])
        if not metadata_prefix:
            why.append(f"metadata_prefix {prefix}: offered ({', '.join(facts.formats)}); pass --prefix for another")
        entry["metadata_prefix"] = prefix
        unmapped = mapping_note(prefix, facts.format_namespaces)
        if unmapped:
            why.append(unmapped)
        if set_spec:
            if facts.sets is not None and set_spec not in facts.sets:
                raise ConfigError(
                    f"{facts.url} does not list the set {set_spec}", source_id=source_id,
                    hint="`harvest-pipeline probe URL` lists its sets",
                )
            entry["set"] = set_spec
        why.append(f"start: omitted, so partitions begin at Identify's earliestDatestamp ({facts.earliest})")
        if facts.deleted_record in ("no", "transient"):
            why.append(
                f"deletedRecord is {facts.deleted_record}: deletions are found by the weekly reconciliation, "
                "whose schedule is on for this source"
            )
    else:
        iso = ISO_SCHEMA in facts.output_schemas
        if iso:
            csw.update(type_names="gmd:MD_Metadata", output_schema=ISO_SCHEMA, modified_queryable="apiso:Modified")
            why.append("csw: ISO 19139 (advertised), windows on apiso:Modified")
        else:
            why.append("csw: Dublin Core csw:Record, windows on dct:modified (ISO 19139 not advertised)")
        if facts.page_size_cap is not None and facts.page_size_cap < 100:
            csw["page_size"] = facts.page_size_cap
            why.append(f"csw.page_size {facts.page_size_cap}: the advertised cap")
        why.append("start: omitted, so partitions begin at the catalogue's oldest modified date")
    entry["window"] = window or "day"
    if not window:
        why.append("window: day (pass --window hour|week|month for a busier or a quieter server)")
    if csw:
        entry["csw"] = csw
    try:
        SourceConfig.model_validate(entry)  # a bad id or URL is refused before anything is written
    except ValidationError as exc:
        raise ConfigError("; ".join(f"field '{'.'.join(map(str, e['loc']))}': {e['msg']}" for e in exc.errors()), source_id=source_id) from None
    return entry, why


def check_source(source: SourceConfig, *, timeout: float = 10.0) -> tuple[bool, str]:
    """(reachable and consistent, one line saying what the server said or what is wrong)."""
    from harvest_pipeline.harvest.listers import lister_for

    quick = source.model_copy(update={"http": source.http.model_copy(update={"timeout_seconds": timeout, "max_retries": 0})})
    try:
        said = lister_for(quick).describe()  # Identify, or GetCapabilities with its schema checks
        if source.protocol == "oai-pmh":
            from harvest_pipeline.oai.client import OAIClient

            client = OAIClient(source.url, headers=source.http_headers(), auth=source.http_auth(), timeout=timeout, http=quick.http)
            formats = [f.prefix for f in client.list_metadata_formats()]
            if source.metadata_prefix not in formats:
                return False, f"metadataPrefix {source.metadata_prefix} is not offered (offered: {', '.join(formats)})"
    except (HarvestError, ConfigError) as exc:
        return False, str(exc)
    return True, (
        f"granularity {said.get('granularity')}, earliest {said.get('earliest_datestamp') or '(unknown)'}, "
        f"deletedRecord {said.get('deleted_record')}"
    )
