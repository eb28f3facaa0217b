"""The proposed source entry says when no mapper reads the chosen format (canned server facts)."""

from __future__ import annotations

from harvest_pipeline.formats import format_for_namespace
from harvest_pipeline.sources.probe import ServerFacts, propose_entry

_NAMESPACES = {
    "oai_dc": "http://www.openarchives.org/OAI/2.0/oai_dc/",
    "marc21": "http://www.loc.gov/MARC21/slim/",  # a trailing slash, as some servers declare it
    "rem_atom": "http://www.w3.org/2005/Atom",
}


def _facts(namespaces: dict[str, str]) -> ServerFacts:
    return ServerFacts("oai-pmh", "http://127.0.0.1:1/oai", earliest="2001-01-01", deleted_record="persistent",
                       formats=list(namespaces), format_namespaces=namespaces)


def test_formats_are_known_by_the_namespace_servers_declare():
    assert [format_for_namespace(ns) for ns in _NAMESPACES.values()] == ["oai_dc", "marcxml", None]
    assert format_for_namespace("") is None and format_for_namespace(None) is None


def test_a_format_no_mapper_reads_is_said_with_the_mapped_ones_offered():
    entry, why = propose_entry(_facts(_NAMESPACES), source_id="atom", metadata_prefix="rem_atom")
    assert entry["metadata_prefix"] == "rem_atom"
    [note] = [w for w in why if "no mapper" in w]
    assert "namespace http://www.w3.org/2005/Atom" in note and "stored raw" in note
    assert "formats it offers that are mapped: oai_dc, marc21 (pass --prefix)" in note
    # A mapped choice says nothing of the kind.
    _, why = propose_entry(_facts(_NAMESPACES), source_id="dc")
    assert not [w for w in why if "no mapper" in w]
    # A server offering nothing mapped is told how to add a format.
    _, why = propose_entry(_facts({"rem_atom": _NAMESPACES["rem_atom"]}), source_id="atom")
    assert any('offers no format that is mapped (README "Adding a format")' in w for w in why)
