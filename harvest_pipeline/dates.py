"""OAI-PMH datestamps and harvest windows.

OAI-PMH has two granularities, :data:`GRANULARITY_DAY` (``YYYY-MM-DD``) and
:data:`GRANULARITY_SECONDS` (``YYYY-MM-DDThh:mm:ssZ``), always UTC, and its ``from``/``until``
arguments are **inclusive**. The harvester thinks in half-open UTC windows ``[start, end)``.
:func:`window_to_oai_bounds` converts one into the other.

Every datetime here is tz-aware; naive datetimes are rejected (ValueError) rather than guessed.
"""

from __future__ import annotations

import re
from datetime import date, datetime, time, timedelta, timezone
from functools import lru_cache
from typing import NamedTuple

__all__ = [
    "GRANULARITY_DAY",
    "GRANULARITY_SECONDS",
    "OAIBounds",
    "parse_datestamp",
    "parse_basic_datestamp",
    "format_datestamp",
    "window_to_oai_bounds",
    "in_window",
    "normalize_granularity",
]

GRANULARITY_DAY = "YYYY-MM-DD"
GRANULARITY_SECONDS = "YYYY-MM-DDThh:mm:ssZ"

UTC = timezone.utc
_ONE_SECOND = timedelta(seconds=1)
_ONE_MICROSECOND = timedelta(microseconds=1)

_DATESTAMP_RE = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})"
    r"(?:T(\d{2}):(\d{2}):(\d{2})(?:[.,](\d+))?(Z|[+-]\d{2}:\d{2}))?",
    re.ASCII,
)


@lru_cache(maxsize=8192)
def _parse_datestamp_cached(s: str) -> datetime:
    m = _DATESTAMP_RE.fullmatch(s)
    if m is None:
        raise ValueError(
            f"not an OAI-PMH datestamp: {s!r} (expected YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ)"
        )
    year, month, day, hh, mm, ss, frac, tz = m.groups()
    try:
        if hh is None:
            return datetime(int(year), int(month), int(day), tzinfo=UTC)
        micro = int((frac + "000000")[:6]) if frac else 0
        dt = datetime(int(year), int(month), int(day), int(hh), int(mm), int(ss), micro, tzinfo=UTC)
    except ValueError as e:
        raise ValueError(f"not a valid OAI-PMH datestamp: {s!r} ({e})") from None
    if tz != "Z":
        sign = 1 if tz[0] == "+" else -1
        oh, om = int(tz[1:3]), int(tz[4:6])
        if oh > 23 or om > 59:
            raise ValueError(f"not a valid UTC offset in datestamp {s!r}")
        dt -= sign * timedelta(hours=oh, minutes=om)
    return dt


def parse_datestamp(s: str) -> datetime:
    """Parse an OAI-PMH datestamp into a tz-aware UTC datetime.

    Accepts ``YYYY-MM-DD`` (midnight UTC) and ``YYYY-MM-DDThh:mm:ssZ``, and tolerates what real
    servers send: fractional seconds (``...:ss.123Z``) and a numeric offset instead of ``Z``
    (``+00:00``; other offsets are converted to UTC). Surrounding whitespace is ignored.
    Anything else (no time zone, ``T`` without a time, impossible dates) raises ValueError.
    """
    if not isinstance(s, str):
        raise ValueError(f"not an OAI-PMH datestamp: {s!r}")
    # fast path for the canonical seconds form (the bulk of every harvest): the shape is
    # checked here, the digits by fromisoformat (C, ASCII digits only)
    if (
        len(s) == 20
        and s[19] == "Z"
        and s[10] == "T"
        and s[4] == "-"
        and s[7] == "-"
        and s[13] == ":"
        and s[16] == ":"
        and s.isascii()
    ):
        try:
            return datetime.fromisoformat(s)
        except ValueError:
            pass  # the slow path gives the proper message
    return _parse_datestamp_cached(s.strip())


# ISO 8601's basic form, which some servers send as record datestamps (Harvard's LibraryCloud:
# "20210311"): not OAI-PMH's form, but it names one instant all the same.
_BASIC_DATESTAMP_RE = re.compile(r"(\d{4})(\d{2})(\d{2})(?:T(\d{2})(\d{2})(\d{2})Z)?", re.ASCII)


def parse_basic_datestamp(s: str) -> datetime:
    """Parse ``YYYYMMDD`` or ``YYYYMMDDThhmmssZ`` into a tz-aware UTC datetime (ValueError otherwise).

    Only for datestamps :func:`parse_datestamp` refused: the caller says the server is not
    conforming."""
    m = _BASIC_DATESTAMP_RE.fullmatch(s.strip()) if isinstance(s, str) else None
    if m is None:
        raise ValueError(f"not a datestamp in ISO 8601's basic form: {s!r}")
    try:
        return datetime(*(int(g) for g in m.groups() if g is not None), tzinfo=UTC)
    except ValueError as e:
        raise ValueError(f"not a valid datestamp: {s!r} ({e})") from None


def normalize_granularity(granularity: str) -> str:
    """Map a granularity string to GRANULARITY_DAY / GRANULARITY_SECONDS (ValueError otherwise).

    Tolerates surrounding whitespace and the fractional-seconds form some servers declare
    (``YYYY-MM-DDThh:mm:ss.sZ``), which is treated as seconds.
    """
    g = (granularity or "").strip()
    if g == GRANULARITY_DAY:
        return GRANULARITY_DAY
    if g == GRANULARITY_SECONDS or g.startswith("YYYY-MM-DDThh:mm:ss"):
        return GRANULARITY_SECONDS
    raise ValueError(
        f"unknown OAI-PMH granularity {granularity!r} "
        f"(expected {GRANULARITY_DAY!r} or {GRANULARITY_SECONDS!r})"
    )


def _as_utc(dt: datetime, what: str) -> datetime:
    if not isinstance(dt, datetime):
        raise ValueError(f"{what} must be a datetime, got {type(dt).__name__}")
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError(f"{what} is a naive datetime ({dt.isoformat()}); pass a tz-aware UTC one")
    return dt.astimezone(UTC)


def _fmt_day(d: date) -> str:
    return f"{d.year:04d}-{d.month:02d}-{d.day:02d}"


def format_datestamp(dt: datetime, granularity: str) -> str:
    """Format a tz-aware datetime for a ``from``/``until`` argument at the given granularity.

    Seconds: ``YYYY-MM-DDThh:mm:ssZ`` (microseconds are truncated). Day: ``YYYY-MM-DD`` of the
    UTC date. Naive datetimes raise ValueError.
    """
    u = _as_utc(dt, "datetime")
    if normalize_granularity(granularity) == GRANULARITY_DAY:
        return _fmt_day(u.date())
    return _fmt_seconds(u)


def _fmt_seconds(u: datetime) -> str:
    return f"{_fmt_day(u.date())}T{u.hour:02d}:{u.minute:02d}:{u.second:02d}Z"


class OAIBounds(NamedTuple):
    """Inclusive ``from``/``until`` arguments for a half-open window ``[start, end)``.

    ``needs_filter`` is True when the server, honouring these bounds, will also return records
    whose datestamps lie *outside* the window (a day-granularity server asked for a window that
    does not start and end at midnight UTC): the caller must then keep only the records for
    which :func:`in_window` is true. It unpacks as a 3-tuple::

        from_, until, needs_filter = window_to_oai_bounds(start, end, granularity)
    """

    from_: str
    until: str
    needs_filter: bool


def window_to_oai_bounds(start: datetime, end: datetime, granularity: str) -> OAIBounds:
    """Turn the half-open UTC window ``[start, end)`` into inclusive OAI ``from``/``until``.

    * seconds granularity: ``from = start``, ``until = end - 1 s``. Exact (``needs_filter`` is
      False): OAI datestamps are whole seconds, so a window edge with sub-second precision is
      rounded *up* to the next whole second on both sides, which selects exactly the whole
      seconds inside the window.
    * day granularity: ``from = date(start)``, ``until = date(last instant inside the window)``
      (for a midnight-aligned end: the day before ``end``). Exact when both ``start`` and
      ``end`` are midnight UTC; otherwise the bounds cover every day the window touches
      (start floored to its day, until = the last day touched) and ``needs_filter`` is True.

    Raises ValueError for naive datetimes, ``start >= end``, an unknown granularity, or (seconds
    granularity) a sub-second window that contains no whole second.
    """
    day = normalize_granularity(granularity) == GRANULARITY_DAY
    s = _as_utc(start, "window start")
    e = _as_utc(end, "window end")
    if s >= e:
        raise ValueError(f"empty window: start {s.isoformat()} is not before end {e.isoformat()}")
    if not day:
        s_ceil = _ceil_second(s)
        last = _ceil_second(e) - _ONE_SECOND
        if last < s_ceil:
            raise ValueError(
                f"window [{s.isoformat()}, {e.isoformat()}) contains no whole second, "
                "so no OAI-PMH datestamp can fall inside it"
            )
        return OAIBounds(_fmt_seconds(s_ceil), _fmt_seconds(last), False)
    last_instant = e - _ONE_MICROSECOND
    aligned = _is_midnight(s) and _is_midnight(e)
    return OAIBounds(_fmt_day(s.date()), _fmt_day(last_instant.date()), not aligned)


def in_window(dt: datetime | None, start: datetime, end: datetime) -> bool:
    """True when ``start <= dt < end`` (all tz-aware); False for ``dt=None``."""
    if dt is None:
        return False
    return _as_utc(start, "window start") <= dt < _as_utc(end, "window end")


def _ceil_second(dt: datetime) -> datetime:
    if dt.microsecond:
        return dt.replace(microsecond=0) + _ONE_SECOND
    return dt


def _is_midnight(dt: datetime) -> bool:
    return dt.timetz().replace(tzinfo=None) == time(0)
