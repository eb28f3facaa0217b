"""DataCite kernel-3/4 `resource` and the oai_datacite wrapper."""

from __future__ import annotations

import pytest

from harvest_pipeline.formats import MappingError, map_record

from .conftest import load_sample, parse_xml


def test_kernel4_full():
    r = map_record(load_sample("datacite4_full.xml"))
    assert r.format_name == "datacite"
    # main title = the one without titleType, even when not first
    assert r.title == "Conductivity, temperature and depth profiles, Station 7, 2019"
    assert r.titles == [
        r.title,
        "OOI CTD 2019",
        "Profils de conductivité, température et profondeur, station 7, 2019",
    ]
    assert r.creators == ["Okafor, Chidi", "Ocean Observatories Initiative"]
    assert r.subjects == ["EARTH SCIENCE > OCEANS > OCEAN TEMPERATURE", "oceanography"]
    # Abstract first even though Methods comes first; <br/> is a line break
    assert r.description == "Profiles of conductivity,\ntemperature and depth\nfrom the 2019 season."
    assert r.dates == ["2019-04-01/2019-09-30", "2020-02-14", "2021-01-05", "2020"]
    assert r.date == "2020-02-14"  # Issued beats publicationYear
    assert r.type == "Dataset"
    assert r.language == "en"
    assert r.identifiers == ["10.5072/ZENODO.12345", "https://zenodo.org/record/12345", "hdl:20.500.12345/99"]
    assert r.doi == "10.5072/zenodo.12345"
    assert r.url == "https://zenodo.org/record/12345"
    assert r.rights == [
        "Creative Commons Attribution 4.0 International",
        "https://creativecommons.org/licenses/by/4.0/legalcode",
        "Open Access",
        "info:eu-repo/semantics/openAccess",
    ]
    # the box wins over the point that precedes it
    assert r.bbox == (-40.0, 59.5, -39.0, 60.2)


def test_given_and_family_names_only_with_unusual_prefix():
    r = map_record(load_sample("datacite4_given_family_only.xml"))
    assert r.creators == ["García López, María José", "Nakamura", "Ola"]
    assert r.title == "a worked example"  # every title typed: the first one is main
    assert r.doi == "10.5072/example-abc" and r.url is None
    assert r.date == "2023" and r.dates == ["2023"]
    assert r.type == "Software"  # from resourceTypeGeneral of an empty element
    assert r.bbox == (139.69, 35.69, 139.69, 35.69)  # point only: zero-size box
    assert r.description is None and r.language is None


def test_oai_datacite_wrapper_with_kernel3():
    r = map_record(load_sample("oai_datacite_kernel3.xml"))
    assert r.format_name == "oai_datacite"
    assert r.titles == ["Relevés de température du lac Léman", "Lake Geneva temperature records"]
    assert r.creators == ["Dubois, Camille"]
    assert r.description == "Hourly readings."  # no Abstract: first description
    assert r.date == "2014" and r.dates == ["2013-11-02", "2014"]
    assert r.type == "Time series"  # empty resourceTypeGeneral: the text
    assert r.language == "fr" and r.rights == ["All rights reserved"]
    assert r.doi == "10.5072/k3.0001"
    # kernel-3 box text is "south west north east"
    assert r.bbox == (6.15, 46.2, 6.9, 46.52)


def test_oai_datacite_1_0_wrapper_with_kernel4_prefixed():
    el = parse_xml(
        '<oai_datacite xmlns="http://schema.datacite.org/oai/oai-1.0/"><payload>'
        '<k:resource xmlns:k="http://datacite.org/schema/kernel-4">'
        '<k:identifier identifierType="DOI">10.5072/W</k:identifier>'
        "<k:titles><k:title>Wrapped</k:title></k:titles></k:resource></payload></oai_datacite>"
    )
    r = map_record(el)
    assert (r.title, r.doi, r.format_name) == ("Wrapped", "10.5072/w", "oai_datacite")


@pytest.mark.parametrize(
    "body, why",
    [
        ("<schemaVersion>4</schemaVersion>", "no <payload>"),
        ("<payload><!-- nothing --></payload>", "no DataCite <resource>"),
    ],
)
def test_oai_datacite_without_resource_is_a_mapping_error(body, why):
    el = parse_xml(f'<oai_datacite xmlns="http://schema.datacite.org/oai/oai-1.1/">{body}</oai_datacite>')
    with pytest.raises(MappingError, match=why) as info:
        map_record(el)
    assert info.value.format_name == "oai_datacite"
    assert "oai_datacite" in str(info.value)


def test_kernel3_point_and_bad_box():
    el = parse_xml(
        '<resource xmlns="http://datacite.org/schema/kernel-3"><geoLocations><geoLocation>'
        "<geoLocationBox>not a box</geoLocationBox><geoLocationPoint>46.2 6.15</geoLocationPoint>"
        "</geoLocation></geoLocations></resource>"
    )
    assert map_record(el).bbox == (6.15, 46.2, 6.15, 46.2)


# pycsw in OAI-PMH mode serves the `datacite` prefix with the kernel namespace dropped (only its
# schemaLocation names it); written for this test after pycsw's functional-test output.
_PYCSW_STYLE = """
<resource xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
          xsi:schemaLocation="http://datacite.org/schema/kernel-4 http://schema.datacite.org/meta/kernel-4.3/metadata.xsd">
  <resourceType resourceTypeGeneral="Dataset">Dataset</resourceType>
  <identifier identifierType="URN">urn:uuid:5f0b2c1e-0000-4000-8000-000000000001</identifier>
  <titles><title xml:lang="eng">Harbour soundings 1998</title></titles>
  <subjects><subject xml:lang="eng">bathymetry</subject><subject/></subjects>
  <creators><creator><creatorName/></creator><creator><creatorName>Marine Survey Office</creatorName></creator></creators>
  <descriptions><description xml:lang="eng">Depths along the outer harbour.</description></descriptions>
  <dates><date dateType="Issued">1998-06-01</date></dates>
  <rightsList/>
</resource>
"""


def test_a_resource_in_no_namespace_is_read_as_datacite():
    r = map_record(parse_xml(_PYCSW_STYLE))
    assert r.format_name == "datacite"
    assert r.title == "Harbour soundings 1998"
    assert r.creators == ["Marine Survey Office"]  # the empty creatorName is skipped
    assert r.subjects == ["bathymetry"]
    assert r.description == "Depths along the outer harbour."
    assert r.date == "1998-06-01" and r.type == "Dataset"
    assert r.identifiers == ["urn:uuid:5f0b2c1e-0000-4000-8000-000000000001"]


def test_a_resource_in_no_namespace_that_is_not_datacite_is_not_read_as_it():
    with pytest.raises(MappingError, match="not read as DataCite"):
        map_record(parse_xml("<resource><name>a web page</name><href>https://example.org/</href></resource>"))
