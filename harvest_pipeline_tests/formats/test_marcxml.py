"""MARC 21 slim records."""

from __future__ import annotations

import pytest

from harvest_pipeline.formats import MappingError, map_record

from .conftest import load_sample, parse_xml

MARC = "http://www.loc.gov/MARC21/slim"


def test_book_with_doi_and_several_700s():
    r = map_record(load_sample("marc_book_doi.xml"))
    assert r.format_name == "marcxml"
    assert r.title == "A study of things : with worked examples"  # 245 $a $b, ISBD " /" trimmed
    assert r.titles == [r.title, "Things"]
    # 100 then 700s in order, trailing commas trimmed, initials kept, repeat dropped
    assert r.creators == ["Smith, Jane", "Doe, J.", "Zhang, Wei"]
    assert r.subjects == ["Things", "Examples", "United States"]
    assert r.description == "An introduction to things, with many examples."
    assert r.dates == ["2015", "©2014"] and r.date == "2015"  # 264 _1 wins; 008 date1 equal
    assert r.type == "Language material"
    assert r.language == "eng"
    assert r.identifiers == [
        "10.5072/Things.2015.ABC",
        "9780306406157",
        "https://doi.org/10.5072/things.2015.abc",
        "https://library.example.edu/record/991234567",
        "https://covers.example.com/9780306406157.jpg",  # 856 _2 (related) last
    ]
    assert r.doi == "10.5072/things.2015.abc"
    assert r.url == "https://library.example.edu/record/991234567"
    assert r.rights == ["Open access.", "CC BY 4.0", "https://creativecommons.org/licenses/by/4.0/"]
    assert r.bbox is None


def test_collection_wrapper_prefixed_map():
    r = map_record(load_sample("marc_collection_map.xml"))
    assert r.format_name == "marcxml"
    assert r.title == "Map of the Yellowstone National Park"
    assert r.creators == ["Geological Survey (U.S.)"]
    assert r.type == "Cartographic material"
    assert r.language == "eng"  # 008 says "mul": first code of the run-together 041 $a
    assert r.date == "[1898?]" and r.dates == ["[1898?]", "1898"]
    assert r.doi == "10.5072/yellowstone-1898"  # from the 856 resolver link
    assert r.url is None
    assert r.identifiers == ["hdl:1234/5678", "http://dx.doi.org/10.5072/YELLOWSTONE-1898"]


def test_collection_must_hold_exactly_one_record():
    two = parse_xml(f'<collection xmlns="{MARC}"><record><leader/></record><record><leader/></record></collection>')
    with pytest.raises(MappingError, match="holds 2 <record> elements") as info:
        map_record(two)
    assert info.value.format_name == "marcxml"
    with pytest.raises(MappingError, match="holds 0"):
        map_record(parse_xml(f'<collection xmlns="{MARC}"/>'))


def test_minimal_record_and_fallbacks():
    r = map_record(
        parse_xml(
            f'<record xmlns="{MARC}"><leader>00000nmm a2200000 a 4500</leader>'
            '<controlfield tag="008">200101s2020    xx            000 0 und d</controlfield>'
            '<datafield tag="245" ind1="0" ind2="0"><subfield code="a">Tool kit.</subfield></datafield>'
            '<datafield tag="264" ind1=" " ind2="4"><subfield code="c">©2019</subfield></datafield>'
            '<datafield tag="041" ind1=" " ind2=" "><subfield code="a">spa</subfield></datafield>'
            "</record>"
        )
    )
    assert r.title == "Tool kit"
    assert r.type == "Computer file"
    assert r.date == "2020" and r.dates == ["©2019", "2020"]  # 008 date1 before a copyright date
    assert r.language == "spa"  # 008 "und": 041
    assert r.identifiers == [] and r.doi is None and r.url is None


def test_empty_record_maps_to_empty_fields():
    r = map_record(parse_xml(f'<record xmlns="{MARC}"/>'))
    assert r.title is None and r.type is None and r.language is None and r.format_name == "marcxml"
