"""Library and Dublin Core coordinate notations (formats/coordinates.py), value by value."""

from __future__ import annotations

import pytest

from harvest_pipeline.formats.coordinates import (
    LATITUDE,
    LONGITUDE,
    bbox_from_coded,
    bbox_from_dcmi,
    bbox_from_statement,
    coded_degrees,
)


@pytest.mark.parametrize(("value", "axis", "degrees"), [
    # the forms MARC 21 lists for 034 $d-$g, each for the same 4°30'15" west
    ("W0043015", LONGITUDE, -(4 + 30 / 60 + 15 / 3600)),  # hdddmmss
    ("W004.504167", LONGITUDE, -4.504167),  # hddd.dddddd
    ("-004.504167", LONGITUDE, -4.504167),  # ddd.dddddd with a sign
    ("W00430.25", LONGITUDE, -(4 + 30.25 / 60)),  # hdddmm.mmmm
    ("W0043015,5", LONGITUDE, -(4 + 30 / 60 + 15.5 / 3600)),  # hdddmmss.sss, comma decimal sign
    ("+0043015", LONGITUDE, 4 + 30 / 60 + 15 / 3600),
    ("N541512", LATITUDE, 54 + 15 / 60 + 12 / 3600),  # a latitude with two degree digits
    ("S0541512", LATITUDE, -(54 + 15 / 60 + 12 / 3600)),
    ("54.25", LATITUDE, 54.25),
])
def test_coded_values_in_each_marc_form(value, axis, degrees):
    assert coded_degrees(value, axis) == pytest.approx(degrees)


@pytest.mark.parametrize("value", [
    "N0043015",  # a latitude's letter on a longitude
    "W0046015",  # 60 minutes
    "W00430155",  # eight digits: no such form
    "W004°30'",  # not a coded value
    "",
])
def test_unreadable_coded_values_give_none(value):
    assert coded_degrees(value, LONGITUDE) is None


def test_coded_box_needs_all_four_and_keeps_west_and_east_as_given():
    assert bbox_from_coded("W1111000", "W1095000", "N0450700", None) is None
    assert bbox_from_coded("E1700000", "W1700000", "N0100000", "S0100000") == (170.0, -10.0, -170.0, 10.0)
    # north and south swapped by the cataloguer: a latitude pair's order is not in doubt
    assert bbox_from_coded("E0790000", "E0860000", "N0110000", "N0200000") == (79.0, 11.0, 86.0, 20.0)


@pytest.mark.parametrize(("statement", "bbox"), [
    ("(W 124°00ʹ--W 114°00ʹ/N 42°00ʹ--N 32°00ʹ).", (-124.0, 32.0, -114.0, 42.0)),  # LC's own marks
    ("(W 73°59'30\"--W 73°56'/N 40°48'--N 40°45')", (-(73 + 59.5 / 60), 40.75, -(73 + 56 / 60), 40.8)),
    ("(E 15°--E 20°/N 50°--N 45°)", (15.0, 45.0, 20.0, 50.0)),  # degrees only
    ("(W 74°00ʹ/N 40°45ʹ)", (-74.0, 40.75, -74.0, 40.75)),  # a point
    ("W0740000 W0730000 N0410000 N0400000", (-74.0, 40.0, -73.0, 41.0)),  # 034's values, as LC's MODS has them
])
def test_statements_of_coordinates(statement, bbox):
    assert bbox_from_statement(statement) == pytest.approx(bbox)


@pytest.mark.parametrize("statement", [
    "(R.A. 16 hr. 30 min. to 19 hr. 30 min./Decl. -16° to -49°)",  # a celestial chart
    "Scale 1:50,000. New York : Sheet E 5",  # prose with a stray letter and number
    "(W 124°--W 114°--W 110°/N 42°--N 32°)",  # three longitudes: which two is not guessed
    "(W 124°70ʹ--W 114°/N 42°--N 32°)",  # 70 minutes
    "",
])
def test_statements_that_are_not_a_box_give_none(statement):
    assert bbox_from_statement(statement) is None


def test_dcmi_box_and_point():
    assert bbox_from_dcmi("westlimit=150.7; eastlimit=151.3; northlimit=-33.7; southlimit=-34.5") == (
        150.7, -34.5, 151.3, -33.7)
    assert bbox_from_dcmi("name=Perisher Valley; east=148.26; north=-36.45") == (148.26, -36.45, 148.26, -36.45)
    assert bbox_from_dcmi("westlimit=300000; eastlimit=400000; northlimit=6e6; southlimit=5.9e6; units=m") is None
    assert bbox_from_dcmi("Sydney") is None
