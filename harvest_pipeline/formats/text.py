"""Small helpers shared by the mappers: element text, whitespace clean-up, ordered de-duplication,
and the few child lookups every flat format needs."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import TypeVar

from .errors import MappingError

_BLANK_LINES = re.compile(r"\n{3,}")
T = TypeVar("T")


def raw_text(el) -> str:
    """All text inside `el` (mixed content included, comments excluded), unstripped.

    A child `<br/>` (DataCite descriptions allow it) becomes a line break.
    """
    # Fast path: the common leaf element.
    if len(el) == 0:
        return el.text or ""
    parts = [el.text or ""]
    for child in el:
        tag = child.tag
        if isinstance(tag, str):  # not a comment / processing instruction
            if tag == "br" or tag.endswith("}br"):
                parts.append("\n")
            else:
                parts.extend(child.itertext())  # the child's subtree, without its own tail
        parts.append(child.tail or "")
    return "".join(parts)


def clean(value: str | None) -> str | None:
    """One-line value: whitespace runs (newlines from pretty-printing included) become one space.

    Returns None for missing or blank values so callers can drop them with a single test.
    """
    if not value:
        return None
    value = " ".join(value.split())
    return value or None


def clean_block(value: str | None) -> str | None:
    """Multi-line value (abstracts): lines stripped and spaces collapsed, paragraph breaks kept."""
    if not value:
        return None
    if "\n" not in value:
        return clean(value)
    lines = [" ".join(line.split()) for line in value.splitlines()]
    value = _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()
    return value or None


def text(el) -> str | None:
    """Cleaned one-line text of an element, or None if it is empty."""
    return clean(raw_text(el))


def block_text(el) -> str | None:
    """Cleaned multi-line text of an element, or None if it is empty."""
    return clean_block(raw_text(el))


def dedupe(values: Iterable[str | None]) -> list[str]:
    """Drop None/empty values and repeats, keeping the first occurrence's position."""
    # dict keeps insertion order and is the fastest ordered-set in CPython.
    return list(dict.fromkeys(v for v in values if v))


def first(values: Iterable[T | None]) -> T | None:
    """The first non-empty value (a text, a box ...), or None."""
    for v in values:
        if v:
            return v
    return None


def child_text(el, tag: str) -> str | None:
    """The cleaned text of `el`'s first child tagged `tag` that has any."""
    for child in el.iterchildren(tag):
        value = text(child)
        if value:
            return value
    return None


def grandchildren(el, parent_tag: str, child_tag: str) -> Iterator:
    """Elements `parent/child` under `el`, in document order."""
    for parent in el.iterchildren(parent_tag):
        yield from parent.iterchildren(child_tag)


def only_child(wrapper, tag: str, what: str):
    """The one child tagged `tag` of a collection wrapper (one OAI item = one record); MappingError
    naming `what` for none or several."""
    records = list(wrapper.iterchildren(tag))
    if len(records) != 1:
        local = tag.rpartition("}")[2]
        raise MappingError(f"{what} holds {len(records)} <{local}> elements; expected exactly one")
    return records[0]
