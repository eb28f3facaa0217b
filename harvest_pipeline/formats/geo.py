"""Bounding boxes: validation into (west, south, east, north) and reading OWS corner pairs.

Axis order of `ows:BoundingBox` (CSW 2.0.2 / OWS 1.0): the CRS decides.
  * `urn:ogc:def:crs:EPSG::4326` (any EPSG URN or http://www.opengis.net/def/crs/EPSG/0/4326
    form) follows the EPSG definition: **latitude first** ("lat lon").
  * CRS84 (`urn:ogc:def:crs:OGC:1.3:CRS84`, `urn:ogc:def:crs:OGC:2:84`, the /OGC/1.3/CRS84 URI),
    the legacy forms `EPSG:4326` and `http://www.opengis.net/gml/srs/epsg.xml#4326`, and a
    missing crs are read **longitude first**.
  * `ows:WGS84BoundingBox` is longitude first by definition.
  * Any other (projected) CRS is not degrees, so no bbox is produced.
Servers get this wrong in both directions, so a box that is only valid (|lat| <= 90) when read
in the other order is read in that order. A box that is valid both ways is taken as declared.
"""

from __future__ import annotations

import math
import re

BBox = tuple[float, float, float, float]

# Geographic CRSs close enough to WGS84 for catalogue search, in EPSG (lat, lon) axis order.
_GEOGRAPHIC_EPSG = frozenset({"4326", "4258", "4269", "4979"})
_EPSG_CODE = re.compile(r"epsg(?::[\d.]*)?::?(\d+)$|/epsg/[^/]*/(\d+)$|epsg\.xml#(\d+)$", re.IGNORECASE)
_CRS84 = re.compile(r"crs:?84$|ogc:2:84$|/crs84$", re.IGNORECASE)

LON_LAT = "lonlat"
LAT_LON = "latlon"


def make_bbox(west, south, east, north) -> BBox | None:
    """A validated (west, south, east, north) from numbers or numeric strings; None if unusable.

    Latitudes must be within [-90, 90] with south <= north; longitudes within [-180, 360]
    (0..360 grids exist). west > east is allowed: the box crosses the antimeridian.
    """
    try:
        w, s, e, n = float(west), float(south), float(east), float(north)
    except (TypeError, ValueError):
        return None
    if not all(map(math.isfinite, (w, s, e, n))):
        return None
    if not (-90.0 <= s <= n <= 90.0):
        return None
    if not (-180.0 <= w <= 360.0 and -180.0 <= e <= 360.0):
        return None
    return (w, s, e, n)


def axis_order(crs: str | None) -> str | None:
    """LON_LAT or LAT_LON for a CRS identifier as it appears in `crs="..."`; None if not degrees."""
    if not crs:
        return LON_LAT
    crs = crs.strip()
    if _CRS84.search(crs):
        return LON_LAT
    m = _EPSG_CODE.search(crs)
    if not m:
        return None
    code = m.group(1) or m.group(2) or m.group(3)
    if code not in _GEOGRAPHIC_EPSG:
        return None
    # The bare "EPSG:4326" and ".../epsg.xml#4326" forms predate the axis-order rules and are
    # lon/lat in practice.
    if m.group(3) or crs.upper() == f"EPSG:{code}":
        return LON_LAT
    return LAT_LON


def bbox_from_corners(lower: str | None, upper: str | None, order: str) -> BBox | None:
    """A bbox from OWS LowerCorner/UpperCorner texts ("a b [height]") in the given axis order."""
    if not lower or not upper:
        return None
    lo, up = lower.split(), upper.split()
    if len(lo) < 2 or len(up) < 2:
        return None
    if order == LAT_LON:
        box = make_bbox(lo[1], lo[0], up[1], up[0])
        swapped = make_bbox(lo[0], lo[1], up[0], up[1])
    else:
        box = make_bbox(lo[0], lo[1], up[0], up[1])
        swapped = make_bbox(lo[1], lo[0], up[1], up[0])
    return box if box is not None else swapped
