"""Helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
from datetime import date, datetime, timezone


def parse_day(text: str) -> datetime:
    try:
        d = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (use YYYY-MM-DD or an ISO timestamp)") from None
    return d.replace(tzinfo=timezone.utc) if d.tzinfo is None else d.astimezone(timezone.utc)


def json_default(value):
    """JSON for the CLI's --json: datetimes as ISO 8601 UTC with `Z` (stored naive, always UTC)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value.isoformat() + "Z"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)
