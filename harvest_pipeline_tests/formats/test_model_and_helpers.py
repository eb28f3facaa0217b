"""NormalizedRecord.to_row and the shared helpers (DOI/URL, bounding boxes, text clean-up)."""

from __future__ import annotations

import pytest

from harvest_pipeline.formats import ROW_KEYS, NormalizedRecord
from harvest_pipeline.formats.geo import LAT_LON, LON_LAT, axis_order, bbox_from_corners, make_bbox
from harvest_pipeline.formats.identifiers import normalize_doi, pick_doi, pick_url
from harvest_pipeline.formats.text import clean, clean_block, dedupe

DOCUMENTED_KEYS = {
    "title", "creators", "subjects", "description", "date", "dates", "type", "language",
    "identifiers", "doi", "url", "rights", "bbox_west", "bbox_south", "bbox_east", "bbox_north",
    "format_name",
}


def test_row_keys_are_the_documented_ones():
    assert set(ROW_KEYS) == DOCUMENTED_KEYS and len(ROW_KEYS) == len(DOCUMENTED_KEYS)
    assert list(NormalizedRecord().to_row()) == list(ROW_KEYS)


def test_to_row_flattens_bbox_and_copies_lists():
    rec = NormalizedRecord(title="T", titles=["T"], creators=["A"], bbox=(1.0, 2.0, 3.0, 4.0), format_name="x")
    row = rec.to_row()
    assert (row["bbox_west"], row["bbox_south"], row["bbox_east"], row["bbox_north"]) == (1.0, 2.0, 3.0, 4.0)
    row["creators"].append("B")
    assert rec.creators == ["A"]  # the row does not alias the record
    empty = NormalizedRecord().to_row()
    assert empty["bbox_west"] is None and empty["creators"] == [] and empty["title"] is None


def test_record_has_slots():
    with pytest.raises(AttributeError):
        NormalizedRecord().not_a_field = 1


@pytest.mark.parametrize(
    "value, expected",
    [
        ("10.1234/ABC.def", "10.1234/abc.def"),
        ("doi:10.1234/ABC", "10.1234/abc"),
        ("DOI: 10.1234/abc", "10.1234/abc"),
        ("info:doi/10.1234/abc", "10.1234/abc"),
        ("https://doi.org/10.1234/ABC", "10.1234/abc"),
        ("http://dx.doi.org/10.1234/abc", "10.1234/abc"),
        ("https://www.doi.org/10.1234/abc", "10.1234/abc"),
        ("doi.org/10.1234/abc", "10.1234/abc"),
        ("https://doi.org/10.1234%2Fabc", "10.1234/abc"),
        ("  10.5281/zenodo.123.  ", "10.5281/zenodo.123"),
        ("10.1000.10/xyz", "10.1000.10/xyz"),
        ("https://example.org/10.1234/abc", None),
        ("hdl:20.500.1/2", None),
        ("10.1234", None),
        ("", None),
        (None, None),
    ],
)
def test_normalize_doi(value, expected):
    assert normalize_doi(value) == expected


def test_pick_url_skips_doi_resolvers_and_non_http():
    ids = ["urn:nbn:de:1", "https://doi.org/10.1/x", "HTTP://dx.doi.org/10.1/y", "https://repo.example/1"]
    assert pick_url(ids) == "https://repo.example/1"
    assert pick_url(["doi:10.1/x"], ["https://link.example/"]) == "https://link.example/"
    assert pick_url([]) is None
    assert pick_doi(["x"], ["https://doi.org/10.1/Z"]) == "10.1/z"


@pytest.mark.parametrize(
    "crs, order",
    [
        (None, LON_LAT),
        ("", LON_LAT),
        ("urn:ogc:def:crs:EPSG::4326", LAT_LON),
        ("urn:ogc:def:crs:EPSG:6.6:4326", LAT_LON),
        ("urn:x-ogc:def:crs:EPSG:4326", LAT_LON),
        ("http://www.opengis.net/def/crs/EPSG/0/4326", LAT_LON),
        ("EPSG:4326", LON_LAT),
        ("http://www.opengis.net/gml/srs/epsg.xml#4326", LON_LAT),
        ("urn:ogc:def:crs:OGC:1.3:CRS84", LON_LAT),
        ("urn:ogc:def:crs:OGC:2:84", LON_LAT),
        ("http://www.opengis.net/def/crs/OGC/1.3/CRS84", LON_LAT),
        ("urn:ogc:def:crs:EPSG::25832", None),
        ("EPSG:3857", None),
        ("something odd", None),
    ],
)
def test_axis_order(crs, order):
    assert axis_order(crs) == order


def test_bbox_from_corners_both_orders_and_swap_rescue():
    assert bbox_from_corners("47 5", "55 15", LAT_LON) == (5.0, 47.0, 15.0, 55.0)
    assert bbox_from_corners("5 47", "15 55", LON_LAT) == (5.0, 47.0, 15.0, 55.0)
    # declared lat/lon but only valid as lon/lat
    assert bbox_from_corners("-120 30", "-100 45", LAT_LON) == (-120.0, 30.0, -100.0, 45.0)
    # 3D corners: height ignored
    assert bbox_from_corners("5 47 0", "15 55 100", LON_LAT) == (5.0, 47.0, 15.0, 55.0)
    assert bbox_from_corners("5", "15 55", LON_LAT) is None
    assert bbox_from_corners(None, "15 55", LON_LAT) is None


def test_make_bbox_validation():
    assert make_bbox("170", "-10", "-170", "10") == (170.0, -10.0, -170.0, 10.0)  # antimeridian
    assert make_bbox("a", 1, 2, 3) is None
    assert make_bbox(None, 1, 2, 3) is None
    assert make_bbox(0, 10, 1, 5) is None  # south > north
    assert make_bbox(0, -91, 1, 5) is None
    assert make_bbox("nan", 1, 2, 3) is None


def test_text_helpers():
    assert clean("  a\n   b\t c ") == "a b c"
    assert clean("   ") is None and clean(None) is None
    assert clean_block("  one\n   two  words\n\n\n\n three ") == "one\ntwo words\n\nthree"
    assert dedupe(["b", None, "a", "", "b", "c", "a"]) == ["b", "a", "c"]
