"""Coordinates as libraries and Dublin Core write them, read into a bounding box.

Three notations reach a harvester from map collections and geodata repositories:
  * coded (MARC 034 $d $e $f $g: westernmost, easternmost, northernmost, southernmost), one
    value per subfield in the forms MARC 21 lists: hdddmmss, hddd.dddddd, hdddmm.mmmm,
    hdddmmss.sss (h: the hemisphere N/S/E/W, or a sign, or nothing), with "." or "," as the
    decimal sign. The digits before the decimal sign say which form it is (3: degrees, 5:
    degrees and minutes, 7: degrees, minutes and seconds; 2, 4 and 6 when a latitude is
    written with two degree digits);
  * the statement of coordinates (MARC 255 $c, which MODS carries as
    subject/cartographics/coordinates): "(W 124°00ʹ--W 114°00ʹ/N 42°00ʹ--N 32°00ʹ)", that is
    west--east/north--south in degrees, minutes and seconds with hemisphere letters, or a
    point "(W 74°00ʹ/N 40°45ʹ)". LC's MARC -> MODS stylesheet also puts 034's coded values
    there ("W0740000 W0730000 N0410000 N0400000"); both are read;
  * DCMI Box and DCMI Point (dc:coverage, dcterms:spatial): "westlimit=150.7; eastlimit=151.3;
    northlimit=-33.7; southlimit=-34.5" and "east=148.26; north=-36.45" in signed degrees.
Anything else (a place name, projected coordinates, a celestial chart's right ascension and
declination, a statement with three longitudes) gives no box rather than a guessed one.
"""

from __future__ import annotations

import re

from .geo import BBox, make_bbox

LONGITUDE = "EW"
LATITUDE = "NS"

_CODED = re.compile(r"([NSEW+-])?(\d+)(?:[.,](\d+))?")
# One coordinate of a statement: a hemisphere letter not inside a word, then either a coded
# value (digits only, "W0740000") or degrees with optional minutes and seconds and their marks.
_STATEMENT_COORDINATE = re.compile(
    r"""(?<![A-Za-z])([NSEW])(?:
        (\d{4,7}(?:[.,]\d+)?)(?![\d°º˚'ʹ′’"ʺ″”])
      | \s*(\d{1,3}(?:[.,]\d+)?)\s*[°º˚]?
        (?:\s*(\d{1,2}(?:[.,]\d+)?)\s*['ʹ′’])?
        (?:\s*(\d{1,2}(?:[.,]\d+)?)\s*["ʺ″”])?
    )""",
    re.VERBOSE,
)
_DCMI_PART = re.compile(r"\s*([A-Za-z]+)\s*=\s*([^;]*)")


def _sexagesimal(degrees: str, minutes: str | None, seconds: str | None) -> float | None:
    value = float(degrees.replace(",", "."))
    for part, scale in ((minutes, 60.0), (seconds, 3600.0)):
        if part:
            part_value = float(part.replace(",", "."))
            if part_value >= 60:
                return None
            value += part_value / scale
    return value


def coded_degrees(value: str | None, axis: str) -> float | None:
    """Signed degrees from one MARC 034 coordinate (axis LONGITUDE or LATITUDE), None if unusable."""
    if not value:
        return None
    m = _CODED.fullmatch(value.strip().upper().replace(" ", ""))
    if m is None:
        return None
    sign, whole, fraction = m.groups()
    if sign and sign.isalpha() and sign not in axis:
        return None  # a latitude's letter on a longitude: not guessed
    fraction = f".{fraction}" if fraction else ""
    n = len(whole)
    if n <= 3:
        degrees = _sexagesimal(whole + fraction, None, None)
    elif n in (4, 5):
        degrees = _sexagesimal(whole[:-2], whole[-2:] + fraction, None)
    elif n in (6, 7):
        degrees = _sexagesimal(whole[:-4], whole[-4:-2], whole[-2:] + fraction)
    else:
        return None
    if degrees is None:
        return None
    return -degrees if sign in ("W", "S", "-") else degrees


def _box(longitudes: list[float], latitudes: list[float]) -> BBox | None:
    """West and east in the order given (a box may cross the antimeridian); either latitude order."""
    if len(longitudes) == 1 and len(latitudes) == 1:
        longitudes, latitudes = longitudes * 2, latitudes * 2
    if len(longitudes) != 2 or len(latitudes) != 2:
        return None
    return make_bbox(longitudes[0], min(latitudes), longitudes[1], max(latitudes))


def bbox_from_coded(west: str | None, east: str | None, north: str | None, south: str | None) -> BBox | None:
    """A box from MARC 034's $d $e $f $g; None unless all four read."""
    lons = [coded_degrees(v, LONGITUDE) for v in (west, east)]
    lats = [coded_degrees(v, LATITUDE) for v in (north, south)]
    if None in lons or None in lats:
        return None
    return _box(lons, lats)


def bbox_from_statement(statement: str | None) -> BBox | None:
    """A box (or a point's box) from a statement of coordinates: two longitudes and two latitudes,
    or one of each, each with its hemisphere letter."""
    if not statement:
        return None
    longitudes: list[float] = []
    latitudes: list[float] = []
    for m in _STATEMENT_COORDINATE.finditer(statement):
        hemisphere, coded, degrees, minutes, seconds = m.groups()
        if coded:
            value = coded_degrees(hemisphere + coded, LONGITUDE if hemisphere in LONGITUDE else LATITUDE)
        else:
            value = _sexagesimal(degrees, minutes, seconds)
            if value is not None and hemisphere in "WS":
                value = -value
        if value is None:
            return None
        (longitudes if hemisphere in LONGITUDE else latitudes).append(value)
    return _box(longitudes, latitudes)


def bbox_from_dcmi(value: str | None) -> BBox | None:
    """A box from a DCMI Box ("westlimit=..; eastlimit=..; northlimit=..; southlimit=..") or a
    point's box from a DCMI Point ("east=..; north=.."); None for other text or other units."""
    if not value or "=" not in value:
        return None
    parts = {name.lower(): v.strip() for name, v in _DCMI_PART.findall(value)}
    units = parts.get("units", "")
    if units and "degree" not in units.lower():
        return None  # DCMI allows other units (a projection's metres): not degrees
    if "westlimit" in parts:
        return make_bbox(parts.get("westlimit"), parts.get("southlimit"), parts.get("eastlimit"), parts.get("northlimit"))
    if "east" in parts and "north" in parts:
        return make_bbox(parts["east"], parts["north"], parts["east"], parts["north"])
    return None
