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
    # 034's coded W1111000 .. N0440800 (west, east, north, south), in degrees and minutes
    assert r.bbox == pytest.approx((-111 - 10 / 60, 44 + 8 / 60, -109 - 50 / 60, 45 + 7 / 60))


def _map_record_with(*fields: str):
    return map_record(parse_xml(f'<record xmlns="{MARC}"><leader>00000cem a2200000 a 4500</leader>'
                                f'<datafield tag="245" ind1="0" ind2="0"><subfield code="a">A map</subfield></datafield>'
                                f'{"".join(fields)}</record>'))


def _field(tag: str, **subfields: str) -> str:
    subs = "".join(f'<subfield code="{code}">{value}</subfield>' for code, value in subfields.items())
    return f'<datafield tag="{tag}" ind1="1" ind2=" ">{subs}</datafield>'


def test_a_map_without_coded_coordinates_takes_its_statement_of_coordinates():
    # 034 with a scale only, then the 255 statement (a point here, the map of one city)
    r = _map_record_with(_field("034", a="a", b="24000"), _field("255", a="Scale 1:24,000", c="(E 2°20ʹ30ʺ/N 48°51ʹ)"))
    assert r.bbox == pytest.approx((2 + 20 / 60 + 30 / 3600, 48.85, 2 + 20 / 60 + 30 / 3600, 48.85))
    # decimal degrees with hemispheres, and a box across the antimeridian (west > east)
    r = _map_record_with(_field("034", d="E170.5", e="W170.25", f="N10", g="S10.5"))
    assert r.bbox == (170.5, -10.5, -170.25, 10.0)


def test_unreadable_coordinates_give_no_box_rather_than_a_guess():
    assert _map_record_with(_field("034", d="W1111000", e="W1095000", f="N0450700")).bbox is None  # no $g
    assert _map_record_with(_field("034", d="N1111000", e="W1095000", f="N0450700", g="N0440800")).bbox is None
    # a celestial chart's right ascension and declination
    assert _map_record_with(_field("255", c="(R.A. 16 hr. to 19 hr./Decl. -16° to -49°)")).bbox is None
    assert _map_record_with(_field("255", c="(W 200°--W 190°/N 42°--N 32°)")).bbox is None  # out of range


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


def test_meeting_record_without_a_title_field_takes_the_meetings_name():
    # INSPIRE's conference records (set INSPIRE:Conferences): a 111 and no 245
    meeting = ('<datafield tag="111" ind1=" " ind2=" "><subfield code="a">2000 Worked Examples Conference</subfield>'
               '<subfield code="c">Reno, Nevada</subfield><subfield code="d">24-28 Jul 2000</subfield></datafield>')
    r = map_record(parse_xml(f'<record xmlns="{MARC}"><leader>00000coc  2200000uu 4500</leader>{meeting}</record>'))
    assert r.title == "2000 Worked Examples Conference" and r.titles == [r.title]
    assert r.creators == ["2000 Worked Examples Conference"]
    # with a title field, the meeting is a creator only
    r = map_record(parse_xml(
        f'<record xmlns="{MARC}">{meeting}<datafield tag="245" ind1="0" ind2="0"><subfield code="a">Proceedings.</subfield>'
        '</datafield></record>'))
    assert r.titles == ["Proceedings"]


def test_empty_record_maps_to_empty_fields():
    r = map_record(parse_xml(f'<record xmlns="{MARC}"/>'))
    assert r.title is None and r.type is None and r.language is None and r.format_name == "marcxml"


# The shape Hindawi's OAI-PMH endpoint serves for metadataPrefix=marc21: the record element is
# prefixed, its children are not, so they fall into the envelope's default (OAI-PMH) namespace.
UNPREFIXED_CHILDREN_PAGE = """<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">
  <responseDate>2026-11-20T10:00:00Z</responseDate>
  <request verb="ListRecords" metadataPrefix="marc21">https://oai.example.org/oai-pmh</request>
  <ListRecords>
    <record>
      <header>
        <identifier>oai:example.org:10.1155/2013/732393</identifier>
        <datestamp>2014-01-15T08:21:03Z</datestamp>
        <setSpec>AAA</setSpec>
      </header>
      <metadata>
        <marc:record xmlns:marc="http://www.loc.gov/MARC21/slim" type="Bibliographic">
          <leader>00000nab a2200000 i 4500</leader>
          <controlfield tag="008">140115s2013    xx            000 0 eng d</controlfield>
          <datafield tag="024" ind1="7" ind2=" ">
            <subfield code="a">10.1155/2013/732393</subfield>
            <subfield code="2">doi</subfield>
          </datafield>
          <datafield tag="100" ind1="1" ind2=" ">
            <subfield code="a">Okafor, Chidi</subfield>
          </datafield>
          <datafield tag="245" ind1="1" ind2="0">
            <subfield code="a">On the stability of a delayed predator-prey model</subfield>
          </datafield>
          <datafield tag="260" ind1=" " ind2=" ">
            <subfield code="b">Hindawi Publishing Corporation</subfield>
            <subfield code="c">2013</subfield>
          </datafield>
          <datafield tag="700" ind1="1" ind2=" ">
            <subfield code="a">Lindqvist, Maria</subfield>
          </datafield>
          <datafield tag="856" ind1="4" ind2="0">
            <subfield code="u">https://www.example.org/journals/aaa/2013/732393/</subfield>
          </datafield>
        </marc:record>
      </metadata>
    </record>
  </ListRecords>
</OAI-PMH>
"""


def _payload_of_the_sample_page():
    from harvest_pipeline.oai import parse_list_records

    page = parse_list_records(UNPREFIXED_CHILDREN_PAGE.encode(), url="https://oai.example.org/oai-pmh")
    [rec] = page.records
    return rec.metadata


def test_unprefixed_children_in_the_envelopes_namespace_are_read_by_local_name():
    # <marc:record> whose datafield/subfield children fall into the OAI-PMH default namespace
    r = map_record(_payload_of_the_sample_page())
    assert r.format_name == "marcxml"
    assert r.title == "On the stability of a delayed predator-prey model"
    assert r.creators == ["Okafor, Chidi", "Lindqvist, Maria"]
    assert r.doi == "10.1155/2013/732393"
    assert r.date == "2013" and r.language == "eng" and r.type == "Language material"
    assert r.url == "https://www.example.org/journals/aaa/2013/732393/"


def test_children_in_two_foreign_namespaces_are_ambiguous_and_say_so():
    doc = parse_xml(
        f'<m:record xmlns:m="{MARC}" xmlns:a="urn:a" xmlns:b="urn:b">'
        '<a:datafield tag="245"><a:subfield code="a">One</a:subfield></a:datafield>'
        '<b:datafield tag="245"><b:subfield code="a">Two</b:subfield></b:datafield></m:record>'
    )
    with pytest.raises(MappingError, match="nothing") as info:
        map_record(doc)
    assert info.value.format_name == "marcxml"
