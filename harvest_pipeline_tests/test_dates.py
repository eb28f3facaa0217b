"""Datestamp parsing/formatting and the half-open window -> inclusive from/until conversion."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from harvest_pipeline.dates import (
    GRANULARITY_DAY,
    GRANULARITY_SECONDS,
    OAIBounds,
    format_datestamp,
    in_window,
    normalize_granularity,
    parse_basic_datestamp,
    parse_datestamp,
    window_to_oai_bounds,
)

UTC = timezone.utc


def d(*a) -> datetime:
    return datetime(*a, tzinfo=UTC)


# ------------------------------------------------------------------------ parse_datestamp


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("2024-02-29", d(2024, 2, 29)),
        ("2024-02-29T23:59:59Z", d(2024, 2, 29, 23, 59, 59)),
        ("2024-02-29T23:59:59.5Z", d(2024, 2, 29, 23, 59, 59, 500000)),
        ("2024-02-29T23:59:59.123456789Z", d(2024, 2, 29, 23, 59, 59, 123456)),
        ("2024-02-29T23:59:59+00:00", d(2024, 2, 29, 23, 59, 59)),
        ("2024-02-29T23:59:59.25+00:00", d(2024, 2, 29, 23, 59, 59, 250000)),
        ("2024-03-01T01:30:00+02:00", d(2024, 2, 29, 23, 30)),
        ("2024-02-29T22:00:00-02:00", d(2024, 3, 1, 0, 0)),
        ("  2024-01-01T00:00:00Z\n", d(2024, 1, 1)),
    ],
)
def test_parse_datestamp_variants(raw, expected):
    got = parse_datestamp(raw)
    assert got == expected
    assert got.tzinfo is not None and got.utcoffset() == timedelta(0)


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "2024",
        "2024-02",
        "2023-02-29",  # not a leap year
        "2024-13-01",
        "2024-01-01T10:00:00",  # no time zone
        "2024-01-01T10:00Z",  # no seconds
        "2024-01-01T",
        "2024-01-01 10:00:00Z",
        "20240101",
        "2024-01-01T25:00:00Z",
        "2024-01-01T10:00:00+25:00",
        "２０２４-01-01",  # non-ASCII digits
        "yesterday",
        # the shape of the fast path with bad contents
        "2024-01-02T10:11:1xZ",
        "2024-01-02T10:11:+1Z",
        "2024-01-02T10:11: 1Z",
        " 024-01-02T10:11:12Z",
        "2024-02-30T10:11:12Z",
        "2024-01-02T10:61:12Z",
        "2024-01-02T10:11:60Z",
    ],
)
def test_parse_datestamp_rejects(raw):
    with pytest.raises(ValueError):
        parse_datestamp(raw)


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("20210311", datetime(2021, 3, 11, tzinfo=UTC)),
        (" 20210311\n", datetime(2021, 3, 11, tzinfo=UTC)),
        ("20210311T101112Z", datetime(2021, 3, 11, 10, 11, 12, tzinfo=UTC)),
    ],
)
def test_parse_basic_datestamp_reads_iso_8601_basic_form(raw, expected):
    assert parse_basic_datestamp(raw) == expected


@pytest.mark.parametrize("raw", ["2021031", "20210230", "2021-03-11", "20210311T1011Z", "20210311T101112", "yesterday", None])
def test_parse_basic_datestamp_rejects_anything_else(raw):
    with pytest.raises(ValueError):
        parse_basic_datestamp(raw)


def test_parse_datestamp_rejects_non_strings():
    with pytest.raises(ValueError):
        parse_datestamp(None)  # type: ignore[arg-type]


# ----------------------------------------------------------------------- format_datestamp


def test_format_datestamp_both_granularities():
    dt = d(2024, 2, 29, 23, 59, 59, 999999)
    assert format_datestamp(dt, GRANULARITY_SECONDS) == "2024-02-29T23:59:59Z"
    assert format_datestamp(dt, GRANULARITY_DAY) == "2024-02-29"


def test_format_datestamp_converts_to_utc_and_rejects_naive():
    cet = timezone(timedelta(hours=1))
    assert format_datestamp(datetime(2024, 1, 1, 0, 30, tzinfo=cet), GRANULARITY_SECONDS) == (
        "2023-12-31T23:30:00Z"
    )
    assert format_datestamp(datetime(2024, 1, 1, 0, 30, tzinfo=cet), GRANULARITY_DAY) == (
        "2023-12-31"
    )
    with pytest.raises(ValueError, match="naive"):
        format_datestamp(datetime(2024, 1, 1), GRANULARITY_DAY)
    with pytest.raises(ValueError, match="granularity"):
        format_datestamp(d(2024, 1, 1), "YYYY")


def test_format_then_parse_roundtrip():
    dt = d(1999, 12, 31, 23, 59, 58)
    assert parse_datestamp(format_datestamp(dt, GRANULARITY_SECONDS)) == dt


def test_normalize_granularity():
    assert normalize_granularity(" YYYY-MM-DD ") == GRANULARITY_DAY
    assert normalize_granularity("YYYY-MM-DDThh:mm:ssZ") == GRANULARITY_SECONDS
    assert normalize_granularity("YYYY-MM-DDThh:mm:ss.sZ") == GRANULARITY_SECONDS
    with pytest.raises(ValueError):
        normalize_granularity("")


# ---------------------------------------------------------------------- window_to_oai_bounds


@pytest.mark.parametrize(
    "start, end, expected",
    [
        # one day
        (d(2024, 1, 1), d(2024, 1, 2), ("2024-01-01T00:00:00Z", "2024-01-01T23:59:59Z")),
        # month end, 30-day month
        (d(2024, 4, 30), d(2024, 5, 1), ("2024-04-30T00:00:00Z", "2024-04-30T23:59:59Z")),
        # leap day
        (d(2024, 2, 29), d(2024, 3, 1), ("2024-02-29T00:00:00Z", "2024-02-29T23:59:59Z")),
        # a whole month across a leap February
        (d(2024, 2, 1), d(2024, 3, 1), ("2024-02-01T00:00:00Z", "2024-02-29T23:59:59Z")),
        # year end
        (d(2023, 12, 31), d(2024, 1, 1), ("2023-12-31T00:00:00Z", "2023-12-31T23:59:59Z")),
        # hourly window
        (d(2024, 3, 1, 5), d(2024, 3, 1, 6), ("2024-03-01T05:00:00Z", "2024-03-01T05:59:59Z")),
        # sub-second edges are rounded up on both sides (datestamps are whole seconds)
        (d(2024, 3, 1, 5, 0, 0, 1), d(2024, 3, 1, 6, 0, 0, 1),
         ("2024-03-01T05:00:01Z", "2024-03-01T06:00:00Z")),
    ],
)
def test_bounds_seconds(start, end, expected):
    b = window_to_oai_bounds(start, end, GRANULARITY_SECONDS)
    assert isinstance(b, OAIBounds)
    assert (b.from_, b.until) == expected
    assert b.needs_filter is False


@pytest.mark.parametrize(
    "start, end, expected",
    [
        (d(2024, 1, 1), d(2024, 1, 2), ("2024-01-01", "2024-01-01")),
        (d(2024, 1, 31), d(2024, 2, 1), ("2024-01-31", "2024-01-31")),  # month end
        (d(2024, 4, 30), d(2024, 5, 1), ("2024-04-30", "2024-04-30")),
        (d(2023, 2, 28), d(2023, 3, 1), ("2023-02-28", "2023-02-28")),  # no leap day
        (d(2024, 2, 28), d(2024, 3, 1), ("2024-02-28", "2024-02-29")),  # leap day included
        (d(2024, 2, 29), d(2024, 3, 1), ("2024-02-29", "2024-02-29")),  # the leap day alone
        (d(2024, 2, 1), d(2024, 3, 1), ("2024-02-01", "2024-02-29")),  # a month
        (d(2023, 12, 1), d(2024, 1, 1), ("2023-12-01", "2023-12-31")),  # year end
    ],
)
def test_bounds_day_aligned(start, end, expected):
    from_, until, needs_filter = window_to_oai_bounds(start, end, GRANULARITY_DAY)
    assert (from_, until) == expected
    assert needs_filter is False


def test_bounds_day_unaligned_window_floors_and_flags():
    # [2024-02-28 18:00, 2024-02-29 06:00) touches two days; the server returns both whole days
    b = window_to_oai_bounds(d(2024, 2, 28, 18), d(2024, 2, 29, 6), GRANULARITY_DAY)
    assert b == OAIBounds("2024-02-28", "2024-02-29", True)
    # an hourly window inside one day
    b = window_to_oai_bounds(d(2024, 2, 29, 5), d(2024, 2, 29, 6), GRANULARITY_DAY)
    assert b == ("2024-02-29", "2024-02-29", True)
    # start aligned, end not: the end's day is touched
    b = window_to_oai_bounds(d(2024, 2, 29), d(2024, 3, 1, 0, 0, 1), GRANULARITY_DAY)
    assert b == ("2024-02-29", "2024-03-01", True)


def test_in_window_is_half_open():
    s, e = d(2024, 2, 29, 5), d(2024, 2, 29, 6)
    assert in_window(d(2024, 2, 29, 5), s, e)
    assert in_window(d(2024, 2, 29, 5, 59, 59), s, e)
    assert not in_window(d(2024, 2, 29, 6), s, e)
    assert not in_window(d(2024, 2, 29, 4, 59, 59), s, e)
    assert not in_window(None, s, e)


def test_bounds_convert_other_timezones_to_utc():
    cet = timezone(timedelta(hours=1))
    b = window_to_oai_bounds(
        datetime(2024, 3, 1, 1, tzinfo=cet), datetime(2024, 3, 2, 1, tzinfo=cet),
        GRANULARITY_DAY,
    )
    assert b == ("2024-03-01", "2024-03-01", False)


@pytest.mark.parametrize(
    "start, end, gran",
    [
        (d(2024, 1, 2), d(2024, 1, 1), GRANULARITY_DAY),  # reversed
        (d(2024, 1, 1), d(2024, 1, 1), GRANULARITY_SECONDS),  # empty
        (datetime(2024, 1, 1), datetime(2024, 1, 2), GRANULARITY_DAY),  # naive
        (d(2024, 1, 1, 0, 0, 0, 100), d(2024, 1, 1, 0, 0, 0, 900), GRANULARITY_SECONDS),
        (d(2024, 1, 1), d(2024, 1, 2), "YYYY"),
    ],
)
def test_bounds_reject_bad_windows(start, end, gran):
    with pytest.raises(ValueError):
        window_to_oai_bounds(start, end, gran)
