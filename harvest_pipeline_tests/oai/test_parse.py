"""Response bytes -> models, from canned XML."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from lxml import etree

from harvest_pipeline.errors import (
    BadResumptionToken,
    IdDoesNotExist,
    MalformedXMLError,
    NoRecordsMatch,
    OAIError,
    ProtocolError,
    XMLSecurityError,
)
from harvest_pipeline.dates import GRANULARITY_DAY, GRANULARITY_SECONDS
from harvest_pipeline.oai import (
    parse_get_record,
    parse_identify,
    parse_list_identifiers,
    parse_list_metadata_formats,
    parse_list_records,
    parse_list_sets,
)
from harvest_pipeline.pages import ResumptionInfo

from .canned import (
    BASE,
    RESPONSE_DATE,
    dc,
    envelope,
    error,
    header,
    list_identifiers,
    list_records,
    oai_dc_page,
    record,
    token,
)

URL = BASE + "?verb=ListRecords&metadataPrefix=oai_dc"
PARAMS = {"verb": "ListRecords", "metadataPrefix": "oai_dc"}
DC_NS = "http://purl.org/dc/elements/1.1/"


def identify_xml(granularity="YYYY-MM-DDThh:mm:ssZ", deleted="persistent", extra="") -> bytes:
    return envelope(
        "<Identify>"
        "<repositoryName>Test Repository</repositoryName>"
        f"<baseURL>{BASE}</baseURL>"
        "<protocolVersion>2.0</protocolVersion>"
        "<adminEmail>a@example.org</adminEmail><adminEmail>b@example.org</adminEmail>"
        "<earliestDatestamp>2001-02-03T04:05:06Z</earliestDatestamp>"
        f"<deletedRecord>{deleted}</deletedRecord>"
        f"<granularity>{granularity}</granularity>"
        "<compression>gzip</compression>"
        f"{extra}"
        "<description><oai-identifier xmlns=\"http://www.openarchives.org/OAI/2.0/oai-identifier\">"
        "<scheme>oai</scheme></oai-identifier></description>"
        "</Identify>",
        verb="Identify",
    )


# ------------------------------------------------------------------------------ Identify


def test_identify_seconds():
    info = parse_identify(identify_xml(), BASE)
    assert info.repository_name == "Test Repository"
    assert info.base_url == BASE
    assert info.protocol_version == "2.0"
    assert info.granularity == GRANULARITY_SECONDS
    assert info.earliest_datestamp == "2001-02-03T04:05:06Z"
    assert info.deleted_record == "persistent"
    assert info.admin_emails == ("a@example.org", "b@example.org")
    assert info.compression == ("gzip",)
    assert info.response_date == RESPONSE_DATE
    assert info.warnings == ()


def test_identify_day_and_transient():
    info = parse_identify(identify_xml("YYYY-MM-DD", "transient"), BASE)
    assert info.granularity == GRANULARITY_DAY
    assert info.deleted_record == "transient"


def test_identify_unknown_values_fall_back_with_warnings():
    info = parse_identify(identify_xml("sometimes", "maybe"), BASE)
    assert info.granularity == GRANULARITY_DAY
    assert info.deleted_record == "no"
    assert any("granularity" in w for w in info.warnings)
    assert any("deletedRecord" in w for w in info.warnings)


# ------------------------------------------------------------------------------ ListRecords


def test_list_records_basic_fields():
    body = list_records(
        [
            record("oai:x:1", "2024-01-02T03:04:05Z", sets=("a", "b:c")),
            record("oai:x:2", "2024-01-03"),
        ],
        token("tok-2", completeListSize="10", cursor="0", expirationDate="2024-05-02T00:00:00Z"),
    )
    page = parse_list_records(body, URL, PARAMS, 1)
    assert page.url == URL and page.params == PARAMS and page.page_number == 1
    assert page.response_date == RESPONSE_DATE
    assert page.byte_size == len(body)
    assert [r.identifier for r in page.records] == ["oai:x:1", "oai:x:2"]
    r1, r2 = page.records
    assert r1.set_specs == ("a", "b:c") and r2.set_specs == ()
    assert r1.datestamp == "2024-01-02T03:04:05Z"
    assert r1.datestamp_utc == datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
    assert r2.datestamp_utc == datetime(2024, 1, 3, tzinfo=timezone.utc)
    assert not r1.deleted
    assert page.resumption == ResumptionInfo(
        token="tok-2", complete_list_size=10, cursor=0,
        expiration_date="2024-05-02T00:00:00Z", present=True,
    )
    assert page.next_token == "tok-2"
    assert page.warnings == []
    assert page.empty_list is False


def test_metadata_xml_is_standalone_and_reparseable_with_namespaces():
    page = parse_list_records(list_records([record("oai:x:1")]), URL, PARAMS, 1)
    rec = page.records[0]
    assert rec.metadata_xml.startswith("<oai_dc:dc")
    assert not rec.metadata_xml.endswith("\n")
    again = etree.fromstring(rec.metadata_xml.encode())
    assert again.tag == "{http://www.openarchives.org/OAI/2.0/oai_dc/}dc"
    assert again.findtext(f"{{{DC_NS}}}title") == "Title of oai:x:1"
    # the xsi prefix used by xsi:schemaLocation was declared on the envelope only
    assert again.get("{http://www.w3.org/2001/XMLSchema-instance}schemaLocation")
    # the lxml element is the same content, still attached to the page tree
    assert rec.metadata.tag == again.tag
    assert rec.metadata.findtext(f"{{{DC_NS}}}creator") == "Doe, Jane"


def test_deleted_header_without_metadata():
    page = parse_list_records(
        list_records([record("oai:x:gone", deleted=True, sets=("s",))]), URL, PARAMS, 1
    )
    rec = page.records[0]
    assert rec.deleted is True
    assert rec.metadata is None and rec.metadata_xml is None
    assert rec.set_specs == ("s",)
    assert page.warnings == []


def test_deleted_header_with_metadata_still_yields_no_metadata():
    page = parse_list_records(
        list_records([record("oai:x:gone", deleted=True, metadata=dc("zombie"))]), URL, PARAMS, 1
    )
    rec = page.records[0]
    assert rec.deleted is True
    assert rec.metadata is None and rec.metadata_xml is None
    assert any("deleted" in w for w in page.warnings)


def test_unparseable_datestamp_gives_none_and_a_warning():
    page = parse_list_records(list_records([record("oai:x:1", "last tuesday")]), URL, PARAMS, 1)
    rec = page.records[0]
    assert rec.datestamp == "last tuesday"
    assert rec.datestamp_utc is None
    assert any("oai:x:1" in w and "datestamp" in w for w in page.warnings)


def test_a_datestamp_in_iso_8601_basic_form_is_read_and_reported():
    # Harvard's LibraryCloud sends "20210311": not OAI-PMH's form, but one date all the same.
    page = parse_list_records(list_records([record("oai:x:1", "20210311"), record("oai:x:2")]), URL, PARAMS, 1)
    rec = page.records[0]
    assert rec.datestamp == "20210311"
    assert rec.datestamp_utc == datetime(2021, 3, 11, tzinfo=timezone.utc)
    assert [w for w in page.warnings if "oai:x:1" in w] == [
        "record oai:x:1: datestamp '20210311' is not in OAI-PMH's form (YYYY-MM-DD[Thh:mm:ssZ]); read as 2021-03-11T00:00:00Z"
    ]
    assert not any("oai:x:2" in w for w in page.warnings)


def test_absent_token_element():
    page = parse_list_records(list_records([record("oai:x:1")]), URL, PARAMS, 1)
    assert page.resumption == ResumptionInfo(token=None, present=False)
    assert page.next_token is None


@pytest.mark.parametrize("tok", [token(None), token(""), token("   \n\t ")])
def test_present_but_empty_or_whitespace_token(tok):
    page = parse_list_records(list_records([record("oai:x:1")], tok), URL, PARAMS, 1)
    assert page.resumption.present is True
    assert page.resumption.token is None
    assert page.next_token is None


def test_token_text_is_stripped():
    page = parse_list_records(list_records([record("oai:x:1")], token("\n  abc==  \n")), URL)
    assert page.next_token == "abc=="


@pytest.mark.parametrize(
    "attrs, size, cursor, n_warnings",
    [
        ({"completeListSize": "1234", "cursor": "100"}, 1234, 100, 0),
        ({"completeListSize": " 7 "}, 7, None, 0),
        ({}, None, None, 0),
        ({"completeListSize": "many", "cursor": "-1"}, None, None, 2),
        ({"completeListSize": "", "cursor": "1.5"}, None, None, 2),
        ({"completeListSize": "1_000", "cursor": "0x10"}, None, None, 2),
    ],
)
def test_complete_list_size_and_cursor(attrs, size, cursor, n_warnings):
    page = parse_list_records(
        list_records([record("oai:x:1")], token("t", **attrs)), URL, PARAMS, 1
    )
    assert page.resumption.complete_list_size == size
    assert page.resumption.cursor == cursor
    assert page.next_token == "t"
    assert len([w for w in page.warnings if "resumptionToken" in w]) == n_warnings


def test_no_records_match_raises_or_becomes_an_empty_page():
    body = error("noRecordsMatch", "nothing here")
    with pytest.raises(NoRecordsMatch) as ei:
        parse_list_records(body, URL, PARAMS, 1)
    assert ei.value.url == URL and ei.value.code == "noRecordsMatch"
    page = parse_list_records(body, URL, PARAMS, 1, empty_on_no_records_match=True)
    assert page.empty_list is True
    assert page.records == []
    assert page.next_token is None
    assert page.response_date == RESPONSE_DATE


@pytest.mark.parametrize(
    "code, cls",
    [
        ("badResumptionToken", BadResumptionToken),
        ("idDoesNotExist", IdDoesNotExist),
        ("badArgument", OAIError),
        ("cannotDisseminateFormat", OAIError),
    ],
)
def test_oai_errors_raise_subclasses_with_url(code, cls):
    with pytest.raises(cls) as ei:
        parse_list_records(error(code, "explained"), URL, PARAMS, 1,
                           empty_on_no_records_match=True)
    assert type(ei.value) is cls
    assert ei.value.code == code
    assert ei.value.url == URL
    assert URL in str(ei.value) and "explained" in str(ei.value)


def test_no_records_match_never_hides_another_error():
    body = envelope('<error code="noRecordsMatch"/><error code="badArgument">bad from</error>')
    with pytest.raises(OAIError) as ei:
        parse_list_records(body, URL, PARAMS, 1, empty_on_no_records_match=True)
    assert ei.value.code == "badArgument"
    assert "noRecordsMatch" in str(ei.value)


def test_list_identifiers_headers_only():
    body = list_identifiers(
        [header("oai:x:1", sets=("a",)), header("oai:x:2", deleted=True)], token("n")
    )
    page = parse_list_identifiers(body, URL, {"verb": "ListIdentifiers"}, 3)
    assert page.page_number == 3
    assert [(r.identifier, r.deleted, r.set_specs) for r in page.records] == [
        ("oai:x:1", False, ("a",)),
        ("oai:x:2", True, ()),
    ]
    assert all(r.metadata is None and r.metadata_xml is None for r in page.records)
    assert page.next_token == "n"


def test_latin1_declared_encoding_is_decoded():
    body = list_records(
        [record("oai:x:é", metadata=dc("Über Straßen", "Müller, Zoë"))], encoding="ISO-8859-1"
    )
    assert "Müller".encode("iso-8859-1") in body  # really latin-1 bytes on the wire
    rec = parse_list_records(body, URL, PARAMS, 1).records[0]
    assert rec.identifier == "oai:x:é"
    assert rec.metadata.findtext(f"{{{DC_NS}}}title") == "Über Straßen"
    assert "Müller, Zoë" in rec.metadata_xml


def test_hostile_xml_is_refused():
    body = (
        b'<?xml version="1.0"?><!DOCTYPE OAI-PMH [<!ENTITY x SYSTEM "file:///etc/passwd">]>'
        + list_records([record("oai:x:1")]).split(b"?>", 1)[1]
    )
    with pytest.raises(XMLSecurityError) as ei:
        parse_list_records(body, URL, PARAMS, 1)
    assert ei.value.url == URL


def test_malformed_page_names_the_url():
    body = list_records([record("oai:x:1")])[:-30]
    with pytest.raises(MalformedXMLError) as ei:
        parse_list_records(body, URL, PARAMS, 1)
    assert URL in str(ei.value)
    assert "line" in str(ei.value)


def test_not_an_oai_document():
    with pytest.raises(ProtocolError) as ei:
        parse_list_records(b"<html><body>Maintenance</body></html>", URL, PARAMS, 1)
    assert "html" in str(ei.value) and URL in str(ei.value)


def test_missing_verb_element_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="neither"):
        parse_list_records(envelope("<Identify/>"), URL, PARAMS, 1)


def test_record_without_identifier_is_skipped_with_a_warning():
    bad = "<record><header><datestamp>2024-01-01</datestamp></header></record>"
    page = parse_list_records(list_records([bad, record("oai:x:2")]), URL, PARAMS, 1)
    assert [r.identifier for r in page.records] == ["oai:x:2"]
    assert any("identifier" in w for w in page.warnings)


def test_100_record_page():
    page = parse_list_records(oai_dc_page(100), URL, PARAMS, 1)
    assert len(page.records) == 100
    assert all(r.metadata_xml and r.datestamp_utc for r in page.records)
    assert page.resumption.complete_list_size == 1000


# ------------------------------------------------------------------- GetRecord, sets, formats


def test_get_record():
    body = envelope(
        f"<GetRecord>{record('oai:x:42', sets=('s1',))}</GetRecord>", verb="GetRecord"
    )
    rec = parse_get_record(body, BASE)
    assert rec.identifier == "oai:x:42"
    assert rec.set_specs == ("s1",)
    assert etree.fromstring(rec.metadata_xml.encode()).findtext(f"{{{DC_NS}}}title") == (
        "Title of oai:x:42"
    )


def test_get_record_id_does_not_exist():
    with pytest.raises(IdDoesNotExist) as ei:
        parse_get_record(error("idDoesNotExist", "no such item", verb="GetRecord"), BASE)
    assert ei.value.url == BASE


def test_list_sets_with_token():
    body = envelope(
        "<ListSets><set><setSpec>a</setSpec><setName>Set A</setName></set>"
        "<set><setSpec>a:b</setSpec><setName>Set A/B</setName>"
        "<setDescription><x xmlns='urn:x'/></setDescription></set>"
        + token("sets-2", completeListSize="3") + "</ListSets>",
        verb="ListSets",
    )
    sets, res = parse_list_sets(body, BASE)
    assert [(s.spec, s.name) for s in sets] == [("a", "Set A"), ("a:b", "Set A/B")]
    assert res.token == "sets-2" and res.complete_list_size == 3


def test_list_metadata_formats():
    body = envelope(
        "<ListMetadataFormats><metadataFormat><metadataPrefix>oai_dc</metadataPrefix>"
        "<schema>http://www.openarchives.org/OAI/2.0/oai_dc.xsd</schema>"
        "<metadataNamespace>http://www.openarchives.org/OAI/2.0/oai_dc/</metadataNamespace>"
        "</metadataFormat></ListMetadataFormats>",
        verb="ListMetadataFormats",
    )
    (fmt,) = parse_list_metadata_formats(body, BASE)
    assert fmt.prefix == "oai_dc"
    assert fmt.schema.endswith("oai_dc.xsd")
    assert fmt.namespace == "http://www.openarchives.org/OAI/2.0/oai_dc/"


# ------------------------------------------------------------------------- odd servers


def test_odd_but_readable_pages_are_read_with_warnings():
    two = "<metadata>" + dc("first") + dc("second") + "</metadata>"
    odd = (
        f'<record><header status="weird"><identifier>oai:x:1</identifier>'
        f"<datestamp>2024-01-01</datestamp><setSpec> s </setSpec><setSpec>  </setSpec>"
        f"</header>{two}</record>"
    )
    body = envelope(f"<ListRecords>{odd}</ListRecords>{token('t9')}", verb="ListRecords")
    page = parse_list_records(body, URL, PARAMS, 1)
    (rec,) = page.records
    assert rec.deleted is False
    assert rec.set_specs == ("s",)
    assert rec.metadata.findtext(f"{{{DC_NS}}}title") == "first"
    assert page.next_token == "t9"  # found outside <ListRecords>
    text = " | ".join(page.warnings)
    assert "weird" in text and "more than one element" in text and "outside" in text


def test_root_without_the_oai_namespace_is_read_with_a_warning():
    body = (
        b"<OAI-PMH><responseDate>2024-01-01T00:00:00Z</responseDate><ListRecords><record>"
        b"<header><identifier>oai:x:1</identifier><datestamp>2024-01-01</datestamp></header>"
        b"<metadata><dc/></metadata></record></ListRecords></OAI-PMH>"
    )
    page = parse_list_records(body, URL, PARAMS, 1)
    assert [r.identifier for r in page.records] == ["oai:x:1"]
    assert page.records[0].metadata_xml == "<dc></dc>"  # canonical XML (exclusive C14N)
    assert any("namespace" in w for w in page.warnings)


def test_identify_without_granularity_defaults_to_day():
    body = envelope(
        "<Identify><repositoryName>R</repositoryName><baseURL>b</baseURL>"
        "<protocolVersion>2.0</protocolVersion><earliestDatestamp>2000-01-01"
        "</earliestDatestamp><deletedRecord>no</deletedRecord></Identify>",
        verb="Identify",
    )
    info = parse_identify(body, BASE)
    assert info.granularity == GRANULARITY_DAY
    assert info.admin_emails == ()
    assert any("granularity" in w for w in info.warnings)


def test_metadata_xml_is_canonical_whatever_the_page_declares():
    """The same record gives the same bytes (and so the same content hash) in any envelope."""
    rec = (
        b"<record><header><identifier>oai:x:1</identifier><datestamp>2024-01-01</datestamp></header>"
        b"<metadata><oai_dc:dc xmlns:oai_dc='http://www.openarchives.org/OAI/2.0/oai_dc/' "
        b"xmlns:dc='http://purl.org/dc/elements/1.1/'><dc:title>T</dc:title></oai_dc:dc></metadata></record>"
    )
    plain = b"<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/'><ListRecords>" + rec + b"</ListRecords></OAI-PMH>"
    busy = (
        b"<OAI-PMH xmlns='http://www.openarchives.org/OAI/2.0/' xmlns:xsi='http://www.w3.org/2001/XMLSchema-instance'"
        b" xmlns:extra='urn:x'><ListRecords>" + rec + b"</ListRecords></OAI-PMH>"
    )
    a = parse_list_records(plain, URL, PARAMS, 1).records[0].metadata_xml
    b = parse_list_records(busy, URL, PARAMS, 1).records[0].metadata_xml
    assert a == b
    assert "OAI/2.0/\"" not in a and "urn:x" not in a  # no envelope namespaces leak in


def test_an_identifier_with_control_characters_is_kept_apart_not_merged():
    from harvest_pipeline.xmlrepair import unescape_identifier

    page_xml = (
        '<?xml version="1.0" encoding="UTF-8"?><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
        "<responseDate>2026-11-02T00:00:00Z</responseDate><request>http://x/oai</request><ListRecords>"
        + "".join(
            f"<record><header><identifier>{i}</identifier><datestamp>2026-11-01T01:00:00Z</datestamp></header>"
            '<metadata><oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
            f'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:identifier>{i}</dc:identifier></oai_dc:dc></metadata></record>'
            for i in ("nul\x00byte", "nulbyte", "tab\x0bbed")
        )
        + "</ListRecords></OAI-PMH>"
    ).encode()
    page = parse_list_records(page_xml, url="http://x/oai")
    ids = [r.identifier for r in page.records]
    assert ids == ["nul\u2400byte", "nulbyte", "tab\u240bbed"]
    assert len(set(ids)) == 3
    assert page.repaired_identifiers == [("nul\u2400byte", "nul\x00byte"), ("tab\u240bbed", "tab\x0bbed")]
    assert [unescape_identifier(s) for s, _ in page.repaired_identifiers] == ["nul\x00byte", "tab\x0bbed"]
    assert any("kept apart" in w and "nul\u2400byte" in w for w in page.warnings)
    # inside the metadata the ordinary repair applies: the characters are removed
    assert ">nulbyte</dc:identifier>" in page.records[0].metadata_xml
