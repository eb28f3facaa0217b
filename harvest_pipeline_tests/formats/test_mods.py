"""MODS 3.x `mods` and a `modsCollection` of one record."""

from __future__ import annotations

import pytest

from harvest_pipeline.formats import MappingError, map_record

from .conftest import load_sample, parse_xml

MODS = 'xmlns="http://www.loc.gov/mods/v3"'


def test_full_record_reads_its_own_elements_not_the_host_collections():
    r = map_record(load_sample("mods_full.xml"))
    assert r.format_name == "mods"
    # the untyped titleInfo is the main title, though an alternative one comes first
    assert r.title == "The tides of the north quay: a survey. Part 2. Winter soundings"
    assert r.titles == [r.title, "Tide tables, north quay"]
    # authors first, then the other names; the host collection's name is not among them
    assert r.creators == ["Okonkwo, Ada", "Halvorsen, Ingrid", "Royal Hydrographic Society"]
    assert r.subjects == ["Tides", "North Quay", "19th century", "Halvorsen, Ingrid", "551.464"]
    # the first note without a type (an ownership note is not a description)
    assert r.description == "Hand-coloured.\n\nTwo sheets."
    assert r.dates == ["1851", "1853", "2019-05-02"]  # not the host collection's 1850
    assert r.date == "2019-05-02"  # keyDate="yes" wins over dateIssued
    assert r.type == "still image"
    assert r.language == "eng"  # the code before the text
    assert r.identifiers == [
        "hso-0001-017",
        "https://doi.org/10.5072/HSO.17",
        "https://collections.example.org/hso/17",
        "https://images.example.org/hso/17/full.tif",
    ]  # the thumbnail (access="preview") is not one of them
    assert r.doi == "10.5072/hso.17"
    assert r.url == "https://collections.example.org/hso/17"  # the object in context, not the DOI resolver
    assert r.rights == ["Public domain", "Open"]
    # subject/cartographics/coordinates, a statement west--east/north--south
    assert r.bbox == pytest.approx((-3 - 12 / 60, 55 + 58 / 60, -3 - 10.5 / 60, 55 + 59 / 60))


def test_sparse_record_falls_back_in_order():
    r = map_record(parse_xml(f"""
        <mods {MODS}>
          <titleInfo type="translated"><title>Notes de lecture</title></titleInfo>
          <name><namePart type="family">Goedicke</namePart></name>
          <abstract>Reading notes.</abstract>
          <note>not the description: there is an abstract</note>
          <genre>letters</genre>
          <originInfo><copyrightDate>2001</copyrightDate><dateModified>2018-07-12</dateModified></originInfo>
          <language><languageTerm type="text">French</languageTerm></language>
          <location><url>http://scholarworks.example.edu/goedicke/9</url></location>
        </mods>"""))
    assert r.title == "Notes de lecture"  # every title typed: the first one is main
    assert r.creators == ["Goedicke"]
    assert r.description == "Reading notes."
    assert r.type == "letters"  # no typeOfResource: the first genre
    assert r.date == "2001" and r.dates == ["2001", "2018-07-12"]
    assert r.language == "French"
    assert r.doi is None and r.url == "http://scholarworks.example.edu/goedicke/9"


def test_collection_of_one_record_is_that_record():
    r = map_record(parse_xml(f"""
        <modsCollection {MODS}><mods><titleInfo><title>Only one</title></titleInfo></mods></modsCollection>"""))
    assert (r.title, r.format_name) == ("Only one", "mods")


def test_collection_of_two_records_is_refused():
    with pytest.raises(MappingError, match="a modsCollection holds 2 <mods> elements"):
        map_record(parse_xml(f"""
            <modsCollection {MODS}>
              <mods><titleInfo><title>One</title></titleInfo></mods>
              <mods><titleInfo><title>Two</title></titleInfo></mods>
            </modsCollection>"""))


def test_comments_and_processing_instructions_are_skipped():
    r = map_record(parse_xml(f"""
        <mods {MODS}>
          <titleInfo><!-- a cataloguer's note --><title>Tides<?pi x?></title></titleInfo>
          <subject><!-- c --><topic>Harbours</topic><?pi y?></subject>
          <originInfo><!-- c --><dateIssued>1853</dateIssued></originInfo>
        </mods>"""))
    assert (r.title, r.subjects, r.date) == ("Tides", ["Harbours"], "1853")
