"""Proceedings of Science's `pos-ext_dc`: Dublin Core in PoS's namespace, creators with affiliations."""

from __future__ import annotations

from harvest_pipeline.formats import map_record

from .conftest import load_sample, parse_xml


def test_a_pos_record_is_read_as_dublin_core_with_each_creators_name():
    r = map_record(load_sample("pos_ext_dc.xml"))
    assert r.format_name == "pos_ext_dc"
    assert r.title == "Lattice results on worked examples"
    assert r.creators == ["Okafor, Chidi", "Brandt, Lena"]  # names only: affiliations stay in the raw XML
    assert r.subjects == ["Lattice Field Theory"]
    assert r.description == "Proceedings of an example symposium; plenary session"
    assert r.date == "2024-05-02T10:00:00Z" and r.type == "Text" and r.language == "en"
    assert r.identifiers == ["PoS(EXAMPLE2023)017"] and r.url is None and r.doi is None
    assert r.rights == ["Creative Commons Attribution 4.0 International"]


def test_a_root_in_the_elements_namespace_and_a_plain_creator_are_read_too():
    r = map_record(parse_xml(
        '<pex-dc xmlns="http://pos.sissa.it/pos-ext_dc/"><title>Plain</title><creator>Doe, J.</creator>'
        '<other:x xmlns:other="urn:other">not Dublin Core</other:x></pex-dc>'))
    assert (r.format_name, r.title, r.creators) == ("pos_ext_dc", "Plain", ["Doe, J."])
