"""Canned CSW 2.0.2 responses and a client wired to them (no sockets)."""

from __future__ import annotations

import requests

from harvest_pipeline.csw import CSWClient
from harvest_pipeline_tests.oai.canned import CannedAdapter

URL = "http://csw.test/csw"
CSW = "http://www.opengis.net/cat/csw/2.0.2"
NS = (f'xmlns:csw="{CSW}" xmlns:dc="http://purl.org/dc/elements/1.1/" '
      'xmlns:dct="http://purl.org/dc/terms/" xmlns:ows="http://www.opengis.net/ows" '
      'xmlns:gmd="http://www.isotc211.org/2005/gmd" xmlns:gco="http://www.isotc211.org/2005/gco"')


def dc_record(ident: str, modified: str = "2026-11-01T10:00:00Z", title: str = "A title", tag: str = "Record") -> str:
    mod = f"<dct:modified>{modified}</dct:modified>" if modified else ""
    return (f"<csw:{tag}><dc:identifier>{ident}</dc:identifier><dc:title>{title}</dc:title>{mod}"
            '<ows:BoundingBox crs="urn:ogc:def:crs:EPSG::4326"><ows:LowerCorner>47.3 8.5</ows:LowerCorner>'
            f"<ows:UpperCorner>47.4 8.6</ows:UpperCorner></ows:BoundingBox></csw:{tag}>")


def iso_record(ident: str, stamp: str = "2026-11-01T10:00:00") -> str:
    return (f"<gmd:MD_Metadata><gmd:fileIdentifier><gco:CharacterString>{ident}</gco:CharacterString>"
            f"</gmd:fileIdentifier><gmd:dateStamp><gco:DateTime>{stamp}</gco:DateTime></gmd:dateStamp>"
            "</gmd:MD_Metadata>")


def results(records: list[str], *, matched: int, next_record: int | None, returned: int | None = None,
            timestamp: str = "2026-11-29T00:00:00Z") -> bytes:
    ret = len(records) if returned is None else returned
    nxt = "" if next_record is None else f' nextRecord="{next_record}"'
    return (f'<?xml version="1.0" encoding="UTF-8"?><csw:GetRecordsResponse {NS} version="2.0.2">'
            f'<csw:SearchStatus timestamp="{timestamp}"/>'
            f'<csw:SearchResults numberOfRecordsMatched="{matched}" numberOfRecordsReturned="{ret}"{nxt} '
            f'elementSet="full">{"".join(records)}</csw:SearchResults></csw:GetRecordsResponse>').encode()


def page_of(first: int, count: int, *, matched: int, next_record: int | None) -> bytes:
    """Records r<first>..r<first+count-1>."""
    return results([dc_record(f"r{i}") for i in range(first, first + count)], matched=matched, next_record=next_record)


def exception_report(code: str, text: str, locator: str | None = None, ns: str = "http://www.opengis.net/ows") -> bytes:
    loc = f' locator="{locator}"' if locator else ""
    return (f'<?xml version="1.0"?><ows:ExceptionReport xmlns:ows="{ns}" version="1.2.0">'
            f'<ows:Exception exceptionCode="{code}"{loc}><ows:ExceptionText>{text}</ows:ExceptionText>'
            "</ows:Exception></ows:ExceptionReport>").encode()


# A pycsw-like capabilities document (OWS 1.0: values directly under Parameter/Constraint).
PYCSW_CAPS = f"""<?xml version="1.0" encoding="UTF-8"?>
<csw:Capabilities xmlns:csw="{CSW}" xmlns:ows="http://www.opengis.net/ows" xmlns:ogc="http://www.opengis.net/ogc"
    xmlns:xlink="http://www.w3.org/1999/xlink" version="2.0.2">
  <ows:ServiceIdentification><ows:Title>pycsw Geospatial Catalogue</ows:Title>
    <ows:ServiceType codeSpace="OGC">CSW</ows:ServiceType><ows:ServiceTypeVersion>2.0.2</ows:ServiceTypeVersion>
  </ows:ServiceIdentification>
  <ows:OperationsMetadata>
    <ows:Operation name="GetCapabilities"><ows:DCP><ows:HTTP><ows:Get xlink:href="http://csw.test/csw"/>
      <ows:Post xlink:href="http://csw.test/csw"/></ows:HTTP></ows:DCP></ows:Operation>
    <ows:Operation name="GetRecords">
      <ows:DCP><ows:HTTP><ows:Get xlink:href="http://csw.test/csw"/><ows:Post xlink:href="http://csw.test/csw/post"/></ows:HTTP></ows:DCP>
      <ows:Parameter name="CONSTRAINTLANGUAGE"><ows:Value>CQL_TEXT</ows:Value><ows:Value>FILTER</ows:Value></ows:Parameter>
      <ows:Parameter name="ElementSetName"><ows:Value>brief</ows:Value><ows:Value>full</ows:Value><ows:Value>summary</ows:Value></ows:Parameter>
      <ows:Parameter name="outputSchema"><ows:Value>http://www.isotc211.org/2005/gmd</ows:Value>
        <ows:Value>http://www.opengis.net/cat/csw/2.0.2</ows:Value></ows:Parameter>
      <ows:Parameter name="resultType"><ows:Value>hits</ows:Value><ows:Value>results</ows:Value><ows:Value>validate</ows:Value></ows:Parameter>
      <ows:Parameter name="typeNames"><ows:Value>csw:Record</ows:Value><ows:Value>gmd:MD_Metadata</ows:Value></ows:Parameter>
    </ows:Operation>
    <ows:Operation name="GetRecordById"><ows:DCP><ows:HTTP><ows:Get xlink:href="http://csw.test/csw"/></ows:HTTP></ows:DCP></ows:Operation>
    <ows:Parameter name="service"><ows:Value>CSW</ows:Value></ows:Parameter>
    <ows:Constraint name="MaxRecordDefault"><ows:Value>10</ows:Value></ows:Constraint>
    <ows:Constraint name="PostEncoding"><ows:Value>XML</ows:Value></ows:Constraint>
  </ows:OperationsMetadata>
  <ogc:Filter_Capabilities><ogc:Scalar_Capabilities><ogc:ComparisonOperators>
    <ogc:ComparisonOperator>GreaterThanEqualTo</ogc:ComparisonOperator><ogc:ComparisonOperator>LessThan</ogc:ComparisonOperator>
  </ogc:ComparisonOperators></ogc:Scalar_Capabilities></ogc:Filter_Capabilities>
</csw:Capabilities>""".encode()

# A GeoNetwork-like one: OWS 1.1 AllowedValues, the cap on the GetRecords operation, no Filter section.
GEONETWORK_CAPS = f"""<?xml version="1.0" encoding="UTF-8"?>
<csw:Capabilities xmlns:csw="{CSW}" xmlns:ows="http://www.opengis.net/ows/1.1" xmlns:xlink="http://www.w3.org/1999/xlink" version="2.0.2">
  <ows:OperationsMetadata>
    <ows:Operation name="GetRecords">
      <ows:DCP><ows:HTTP><ows:Post xlink:href="http://csw.test/csw"/></ows:HTTP></ows:DCP>
      <ows:Parameter name="TypeNames"><ows:AllowedValues><ows:Value>gmd:MD_Metadata</ows:Value></ows:AllowedValues></ows:Parameter>
      <ows:Parameter name="outputSchema"><ows:AllowedValues><ows:Value>http://www.isotc211.org/2005/gmd</ows:Value></ows:AllowedValues></ows:Parameter>
      <ows:Parameter name="constraintLanguage"><ows:AllowedValues><ows:Value>FILTER</ows:Value></ows:AllowedValues></ows:Parameter>
      <ows:Constraint name="DefaultMaxRecords"><ows:AllowedValues><ows:Value>50</ows:Value></ows:AllowedValues></ows:Constraint>
    </ows:Operation>
  </ows:OperationsMetadata>
</csw:Capabilities>""".encode()


def make_client(responses, **kw) -> tuple[CSWClient, CannedAdapter]:
    adapter = CannedAdapter(responses)
    session = requests.Session()
    session.mount("http://csw.test/", adapter)
    return CSWClient(kw.pop("url", URL), session=session, **kw), adapter
