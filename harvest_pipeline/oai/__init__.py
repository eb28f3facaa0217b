"""OAI-PMH 2.0 protocol core: data shapes, response parsing and a client (no Dagster)."""

from harvest_pipeline.oai.client import DEFAULT_USER_AGENT, OAIClient
from harvest_pipeline.oai.models import IdentifyInfo, MetadataFormat, OAISet
from harvest_pipeline.oai.parse import (
    OAI_NS,
    parse_get_record,
    parse_identify,
    parse_list_identifiers,
    parse_list_metadata_formats,
    parse_list_records,
    parse_list_sets,
    parse_resumption_token,
    raise_for_oai_errors,
)

__all__ = [
    "DEFAULT_USER_AGENT",
    "OAI_NS",
    "IdentifyInfo",
    "MetadataFormat",
    "OAIClient",
    "OAISet",
    "parse_get_record",
    "parse_identify",
    "parse_list_identifiers",
    "parse_list_metadata_formats",
    "parse_list_records",
    "parse_list_sets",
    "parse_resumption_token",
    "raise_for_oai_errors",
]
