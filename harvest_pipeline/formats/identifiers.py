"""DOI normalization and choice of the record's landing URL from its identifiers and links."""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import unquote

# The identifier forms a DOI arrives in: "doi:10.x/y", "info:doi/10.x/y", "https://doi.org/10.x/y",
# "http://dx.doi.org/10.x/y", "doi.org/10.x/y", or bare "10.x/y". Registrant codes are "10." plus
# digits (with optional ".sub" parts); the suffix is anything without whitespace.
_DOI = re.compile(
    r"""^(?:
        doi:\s*
      | info:doi/
      | (?:https?://)?(?:dx\.|www\.)?doi\.org/
    )?
    (10\.\d+(?:\.\d+)*/\S+)$""",
    re.IGNORECASE | re.VERBOSE,
)

# Hosts whose URLs are DOI resolutions, not landing pages: they yield `doi`, never `url`.
_DOI_RESOLVER = re.compile(r"^https?://(?:dx\.|www\.)?doi\.org/", re.IGNORECASE)


def normalize_doi(value: str | None) -> str | None:
    """Lowercase "10.xxxx/suffix" if `value` is a DOI in any usual form, else None.

    DOIs are case-insensitive, so lowercasing makes them comparable across sources. Resolver URLs
    are percent-decoded ("10.1234%2Fabc" -> "10.1234/abc").
    """
    if not value:
        return None
    if "%" in value:
        value = unquote(value.strip())
    elif "10." not in value:
        return None  # every DOI holds "10." (the regular expression below is the slow test)
    else:
        value = value.strip()
    m = _DOI.match(value)
    if not m:
        return None
    return m.group(1).rstrip(".,;").lower()


def is_http(value: str) -> bool:
    return value[:7].lower() == "http://" or value[:8].lower() == "https://"


def pick_doi(*candidates: Iterable[str]) -> str | None:
    """The first value (across the iterables, in order) that is a DOI, normalized."""
    for values in candidates:
        for v in values:
            doi = normalize_doi(v)
            if doi:
                return doi
    return None


def pick_url(*candidates: Iterable[str]) -> str | None:
    """The first http(s) value (across the iterables, in order) that is not a DOI resolver URL.

    Mappers pass the identifiers first and format-specific links (ISO online resources, CSW
    dct:references) after, so a real identifier always wins over a download link.
    """
    for values in candidates:
        for v in values:
            if is_http(v) and not _DOI_RESOLVER.match(v):
                return v
    return None
