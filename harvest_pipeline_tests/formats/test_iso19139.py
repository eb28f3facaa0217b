"""ISO 19139 gmd:MD_Metadata / gmi:MI_Metadata."""

from __future__ import annotations

from harvest_pipeline.formats import map_record

from .conftest import load_sample, parse_xml


def test_full_record():
    r = map_record(load_sample("iso19139_full.xml"))
    assert r.format_name == "iso19139"
    assert r.title == "Hochwassergefahrenkarte Elbe"
    assert r.titles == ["Hochwassergefahrenkarte Elbe", "Flood hazard map Elbe", "HWGK Elbe"]
    # cited parties then point of contact; individual preferred; metadata contact excluded
    assert r.creators == ["Schulz, Petra", "Landesamt für Umwelt", "Flussgebietsgemeinschaft Elbe"]
    assert r.subjects == ["Hochwasser", "Elbe", "Natural risk zones", "inlandWaters"]
    assert r.description == "Flood hazard areas for HQ10, HQ100 and HQ extreme.\n\nDerived from 2D hydraulic modelling."
    assert r.dates == ["2015-03-01", "2016-01-15", "2020-11-02T08:30:00", "2021-06-30T12:00:00"]
    assert r.date == "2016-01-15"  # publication
    assert r.type == "dataset"
    assert r.language == "eng"  # resource language beats metadata language
    assert r.identifiers == [
        "3f6b1e2a-7c1d-4e8f-a1b2-c3d4e5f60789",
        "https://registry.example.de/flood/elbe-hwgk",
        "doi:10.5072/HWGK.ELBE",
        "https://doi.org/10.5072/HWGK.ELBE",
    ]
    assert r.doi == "10.5072/hwgk.elbe"
    assert r.url == "https://registry.example.de/flood/elbe-hwgk"
    assert r.rights == [
        "Not for navigation.",
        "Datenlizenz Deutschland – Namensnennung – Version 2.0",
        "https://www.govdata.de/dl-de/by-2-0",
    ]
    assert r.bbox == (10.55, 50.32, 14.95, 53.9)


def test_anchor_titles_service_no_bbox_default_namespace():
    r = map_record(load_sample("iso19139_anchor_no_bbox.xml"))
    assert r.title == "Tide gauge view service"
    assert r.titles == ["Tide gauge view service", "TG-WMS"]
    assert r.creators == ["Rao, Priya"]
    assert r.type == "service"  # empty codeListValue: element text
    assert r.language == "en"  # metadata language as CharacterString
    assert r.date == "2019-09-09" and r.dates == ["2019-09-09", "2022-02-02"]
    assert r.bbox is None
    assert r.identifiers == ["svc-0042"] and r.url is None and r.doi is None


def test_gmi_root_antimeridian_box_and_dataset_uri():
    r = map_record(load_sample("gmi_mi_metadata.xml"))
    assert r.format_name == "iso19139"
    assert r.bbox == (179.2, -17.5, -179.1, -16.5)
    assert r.url == "https://catalogue.example.eu/collections/s2-l2a"
    assert r.date == "2023-07-07"  # no citation dates: dateStamp


def test_online_resource_is_the_url_fallback():
    el = parse_xml(
        '<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd" xmlns:gco="http://www.isotc211.org/2005/gco">'
        "<gmd:fileIdentifier><gco:CharacterString>abc</gco:CharacterString></gmd:fileIdentifier>"
        "<gmd:distributionInfo><gmd:MD_Distribution><gmd:transferOptions><gmd:MD_DigitalTransferOptions>"
        "<gmd:onLine><gmd:CI_OnlineResource><gmd:linkage><gmd:URL> https://dl.example/a.zip </gmd:URL>"
        "</gmd:linkage></gmd:CI_OnlineResource></gmd:onLine>"
        "</gmd:MD_DigitalTransferOptions></gmd:transferOptions></gmd:MD_Distribution></gmd:distributionInfo>"
        "</gmd:MD_Metadata>"
    )
    r = map_record(el)
    assert r.url == "https://dl.example/a.zip" and r.identifiers == ["abc"] and r.title is None


def test_parties_with_a_creators_role_come_first():
    party = ('<gmd:citedResponsibleParty><gmd:CI_ResponsibleParty><gmd:organisationName><gco:CharacterString>{}'
             '</gco:CharacterString></gmd:organisationName><gmd:role><gmd:CI_RoleCode codeList="#CI_RoleCode" '
             'codeListValue="{}"/></gmd:role></gmd:CI_ResponsibleParty></gmd:citedResponsibleParty>')
    el = parse_xml(
        '<gmd:MD_Metadata xmlns:gmd="http://www.isotc211.org/2005/gmd" xmlns:gco="http://www.isotc211.org/2005/gco">'
        '<gmd:identificationInfo><gmd:MD_DataIdentification><gmd:citation><gmd:CI_Citation>'
        '<gmd:title><gco:CharacterString>Soil moisture grids</gco:CharacterString></gmd:title>'
        + party.format("State Data Portal", "publisher") + party.format("Soil Survey Unit", "originator")
        + party.format("Archive Service", "custodian") + party.format("Okafor, Chidi", "principalInvestigator")
        + '</gmd:CI_Citation></gmd:citation><gmd:pointOfContact><gmd:CI_ResponsibleParty><gmd:individualName>'
        '<gco:CharacterString>Brandt, Lena</gco:CharacterString></gmd:individualName><gmd:role><gmd:CI_RoleCode '
        'codeList="#CI_RoleCode" codeListValue="author"/></gmd:role></gmd:CI_ResponsibleParty></gmd:pointOfContact>'
        '</gmd:MD_DataIdentification></gmd:identificationInfo></gmd:MD_Metadata>')
    r = map_record(el)
    # who made it first (in element order, cited parties before contacts), then everyone else
    assert r.creators == ["Soil Survey Unit", "Okafor, Chidi", "Brandt, Lena", "State Data Portal", "Archive Service"]
