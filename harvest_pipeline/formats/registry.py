"""Which mapper reads a metadata payload, chosen by the payload root's namespace + local name.

Adding a format takes one new file plus one registration line:
  1. `harvest_pipeline/formats/myformat.py` defines a mapper `(lxml element) -> NormalizedRecord`
     and `REGISTRATIONS = ((namespace, root_local_name, mapper, format_name), ...)`;
  2. add `"myformat"` to `MAPPER_MODULES` in `harvest_pipeline/formats/__init__.py`.
A mapper reads only; it raises MappingError (or ValueError) for a record it cannot handle.
(`register()` can also be called directly, e.g. by a plugin or a test.)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from lxml import etree

from .errors import MappingError
from .model import NormalizedRecord

Mapper = Callable[[etree._Element], NormalizedRecord]

# Errors a mapper may hit on a record it does not understand (odd values, unexpected structure).
# They become MappingError so one bad record can be skipped/quarantined instead of failing a whole
# harvest; the original stays chained as __cause__ so a real mapper bug is still visible.
_RECORD_ERRORS = (ValueError, TypeError, IndexError, KeyError, AttributeError, etree.LxmlError)


@dataclass(frozen=True, slots=True)
class RegisteredFormat:
    name: str
    namespace: str
    root_local_name: str
    mapper: Mapper


# Keyed by the root's Clark tag "{namespace}local" so dispatch is one dict lookup on element.tag.
_BY_TAG: dict[str, RegisteredFormat] = {}
# For a root no registration names, in order: (claims(element) -> bool, its format). A module
# declares them as `FALLBACKS = ((claims, mapper, name), ...)`.
_FALLBACKS: list[tuple[Callable[[etree._Element], bool], RegisteredFormat]] = []


def _clark(namespace: str, local: str) -> str:
    return f"{{{namespace}}}{local}" if namespace else local


def _split(tag: str) -> tuple[str, str]:
    if tag[:1] == "{":
        ns, _, local = tag[1:].partition("}")
        return ns, local
    return "", tag


def register(namespace: str, root_local_name: str, mapper: Mapper, name: str, *, replace: bool = False) -> None:
    """Route payloads whose root is `{namespace}root_local_name` to `mapper`, labelled `name`.

    Registering the same mapper and name again is a no-op (re-imports are harmless); a different
    one for a taken root raises ValueError unless `replace=True`.
    """
    if not root_local_name or not name or not callable(mapper):
        raise ValueError("register() needs a root local name, a callable mapper and a format name")
    tag = _clark(namespace, root_local_name)
    entry = RegisteredFormat(name, namespace, root_local_name, mapper)
    old = _BY_TAG.get(tag)
    if old is not None and not replace and (old.mapper is not mapper or old.name != name):
        raise ValueError(f"root {tag} is already mapped by format {old.name!r}")
    _BY_TAG[tag] = entry


def unregister(namespace: str, root_local_name: str) -> None:
    """Forget a registration (no error if absent); meant for tests and plugins."""
    _BY_TAG.pop(_clark(namespace, root_local_name), None)


def register_fallback(claims: Callable[[etree._Element], bool], mapper: Mapper, name: str) -> None:
    """Route payloads whose root no registration names, and that `claims` accepts, to `mapper`."""
    if any(c is claims and f.mapper is mapper and f.name == name for c, f in _FALLBACKS):
        return  # registered before (a re-import)
    _FALLBACKS.append((claims, RegisteredFormat(name, "", f"(any root {getattr(claims, '__name__', 'claimed')})", mapper)))


def register_module(module: ModuleType) -> None:
    """Register every `(namespace, root_local_name, mapper, name)` in `module.REGISTRATIONS`, and
    every `(claims, mapper, name)` in its `FALLBACKS` if it has any."""
    for namespace, root, mapper, name in module.REGISTRATIONS:
        register(namespace, root, mapper, name)
    for claims, mapper, name in getattr(module, "FALLBACKS", ()):
        register_fallback(claims, mapper, name)


def known_formats() -> list[RegisteredFormat]:
    """Every registration, sorted by format name then root, for listings and error messages."""
    return sorted(_BY_TAG.values(), key=lambda f: (f.name, f.namespace, f.root_local_name))


def format_for_namespace(namespace: str | None) -> str | None:
    """The format that maps payloads in `namespace` (as ListMetadataFormats declares it, a trailing
    slash aside), or None: such records are stored raw, unless a fallback (Dublin Core elements)
    claims them."""
    wanted = (namespace or "").strip().rstrip("/")
    if not wanted:
        return None
    return next((f.name for f in known_formats() if f.namespace.rstrip("/") == wanted), None)


def _root_of(element) -> etree._Element:
    if element is None:
        raise MappingError("no metadata element to map (a deleted record has none)")
    if isinstance(element, etree._ElementTree):
        element = element.getroot()
    if not isinstance(element, etree._Element) or not isinstance(element.tag, str):
        raise MappingError(f"cannot map {type(element).__name__}: expected an lxml element")
    return element


def _entry_for(element: etree._Element) -> RegisteredFormat:
    entry = _BY_TAG.get(element.tag)
    if entry is None:
        for claims, fallback in _FALLBACKS:
            if claims(element):
                return fallback
        ns, local = _split(element.tag)
        # Name the formats that use the same root name: the usual cause is a namespace typo or
        # version (".../kernel-4" vs ".../kernel-4.1") on the server side.
        same_local = [f"{f.name} ({_clark(f.namespace, f.root_local_name)})" for f in known_formats() if f.root_local_name == local]
        why = f"; registered roots named {local!r}: {', '.join(same_local)}" if same_local else ""
        raise MappingError(
            f"no mapper for metadata root {local!r} in namespace {ns or '(none)'!r}{why}",
            root=element.tag,
            hint="register a mapper for this format in harvest_pipeline.formats, or harvest a supported metadataPrefix",
        )
    return entry


def mapper_for(element) -> Mapper:
    """The mapper registered for this element's root; MappingError if the format is unknown."""
    return _entry_for(_root_of(element)).mapper


def map_record(element) -> NormalizedRecord:
    """Map a metadata payload (the child of OAI-PMH <metadata>, or a CSW record) to a NormalizedRecord.

    Raises MappingError for an unknown format or a record its mapper cannot handle; the message
    names the format and root. `format_name` of the result is the registered format name.
    """
    element = _root_of(element)
    entry = _entry_for(element)
    try:
        record = entry.mapper(element)
    except MappingError as exc:
        # The mapper says why; the registry adds which format and root, once.
        if exc.format_name is None:
            exc.message = f"format {entry.name!r} (root {element.tag}): {exc.message}"
            exc.args = (exc.message,)
            exc.format_name = entry.name
        exc.root = exc.root or element.tag
        raise
    except _RECORD_ERRORS as exc:
        raise MappingError(
            f"format {entry.name!r} (root {element.tag}) could not map the record: {type(exc).__name__}: {exc}",
            format_name=entry.name,
            root=element.tag,
        ) from exc
    if not isinstance(record, NormalizedRecord):  # a mapper bug, not a bad record
        raise TypeError(f"mapper for format {entry.name!r} returned {type(record).__name__}, not NormalizedRecord")
    record.format_name = entry.name
    if _is_empty(record):
        _refuse_if_payload_has_content(element, entry)
    return record


def _is_empty(record: NormalizedRecord) -> bool:
    return not (
        record.title or record.titles or record.creators or record.subjects or record.description
        or record.dates or record.date or record.type or record.language or record.identifiers
        or record.doi or record.url or record.rights or record.bbox
    )


def _refuse_if_payload_has_content(element: etree._Element, entry: RegisteredFormat) -> None:
    """A mapper that reads nothing from a payload holding text did not understand it (its
    elements are in an unexpected namespace, say): say so rather than store a blank record."""
    elements = sum(1 for e in element.iter() if isinstance(e.tag, str))
    chars = sum(len(t.strip()) for t in element.itertext())
    if not chars:
        return
    raise MappingError(
        f"format {entry.name!r} (root {element.tag}) got nothing out of a payload of {elements} elements "
        f"and {chars} characters of text: no title, creator, identifier, date or any other field",
        format_name=entry.name,
        root=element.tag,
        hint="the payload's elements are probably in a namespace this mapper does not expect; "
        "look at records.metadata_xml and extend the mapper",
    )
