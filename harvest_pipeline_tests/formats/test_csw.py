"""CSW Dublin Core records (Record / SummaryRecord / BriefRecord) and ows bbox axis order."""

from __future__ import annotations

import pytest

from harvest_pipeline.formats import map_record

from .conftest import load_sample, parse_xml

GERMANY = (5.87, 47.27, 15.04, 55.06)


def test_record_epsg4326_urn_is_lat_lon():
    r = map_record(load_sample("csw_record_epsg4326_latlon.xml"))
    assert r.bbox == GERMANY
    assert r.format_name == "csw_record"
    assert r.title == "Land cover of Germany 2018"
    assert r.description == "Land cover classes derived from Sentinel-2 imagery."  # dct:abstract first
    assert r.dates == ["2020-01-31"] and r.date == "2020-01-31"  # dct:modified as the only date
    assert r.subjects == ["land cover", "Corine"]
    assert r.language == "ger" and r.type == "dataset"
    assert r.rights == ["no limitations"]
    assert r.identifiers == ["8f1b6c4e-3a5d-4b5e-9d7a-1c2b3a4d5e6f"]
    # no http identifier: the dct:references link is the url
    assert r.url == "https://maps.example.de/wms?service=WMS&request=GetCapabilities"


def test_record_crs84_default_namespaces_is_lon_lat():
    r = map_record(load_sample("csw_record_crs84_lonlat.xml"))
    assert r.bbox == GERMANY
    assert r.dates == ["2019-06-01", "2020-01-31"] and r.date == "2019-06-01"  # created beats modified
    assert r.url == "https://data.example.org/dataset/landcover-2018"


def test_projected_bbox_skipped_for_wgs84_one():
    r = map_record(load_sample("csw_summary_projected_then_wgs84.xml"))
    assert r.bbox == (11.87, 50.17, 15.04, 51.68)
    assert r.format_name == "csw_record"


def test_declared_lat_lon_but_written_lon_lat_is_rescued():
    r = map_record(load_sample("csw_brief_wrong_axis_order.xml"))
    assert r.bbox == (-120.5, 30.0, -100.0, 45.0)


@pytest.mark.parametrize(
    "crs_attr, lower, upper",
    [
        ('crs="urn:ogc:def:crs:EPSG::4326"', "-33.9 18.4", "-33.8 18.6"),
        ('crs="http://www.opengis.net/def/crs/EPSG/0/4326"', "-33.9 18.4", "-33.8 18.6"),
        ('crs="urn:ogc:def:crs:OGC:1.3:CRS84"', "18.4 -33.9", "18.6 -33.8"),
        ('crs="EPSG:4326"', "18.4 -33.9", "18.6 -33.8"),
        ("", "18.4 -33.9", "18.6 -33.8"),
    ],
)
def test_axis_order_by_crs(crs_attr, lower, upper):
    el = parse_xml(
        '<csw:Record xmlns:csw="http://www.opengis.net/cat/csw/2.0.2" xmlns:ows="http://www.opengis.net/ows">'
        f"<ows:BoundingBox {crs_attr}><ows:LowerCorner>{lower}</ows:LowerCorner>"
        f"<ows:UpperCorner>{upper}</ows:UpperCorner></ows:BoundingBox></csw:Record>"
    )
    assert map_record(el).bbox == (18.4, -33.9, 18.6, -33.8)


def test_csw3_record_and_broken_bbox():
    el = parse_xml(
        '<csw:Record xmlns:csw="http://www.opengis.net/cat/csw/3.0" xmlns:dc="http://purl.org/dc/elements/1.1/"'
        ' xmlns:ows="http://www.opengis.net/ows/2.0"><dc:title>CSW 3</dc:title>'
        "<ows:BoundingBox><ows:LowerCorner>x y</ows:LowerCorner><ows:UpperCorner>1 2</ows:UpperCorner></ows:BoundingBox>"
        "<ows:WGS84BoundingBox><ows:LowerCorner>1 2</ows:LowerCorner><ows:UpperCorner>3 4</ows:UpperCorner></ows:WGS84BoundingBox>"
        "</csw:Record>"
    )
    r = map_record(el)
    assert r.title == "CSW 3" and r.bbox == (1.0, 2.0, 3.0, 4.0) and r.format_name == "csw_record"
