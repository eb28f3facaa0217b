"""Adding and removing sources in the sources YAML without losing its comments or `${VAR}`s.

ruamel.yaml reads the file as a round-trip document (comments, order, quoting kept), so an edit
changes the lines of that one source only. The new file is validated like any load before it
replaces the old one (written beside it, then renamed): a bad edit never leaves a broken file.
"""

from __future__ import annotations

import fcntl
import io
import os
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from harvest_pipeline.errors import ConfigError
from harvest_pipeline.sources.registry import SourceConfig, load_sources, sources_file_path

HEADER = (
    "# Sources to harvest. Path: env var HARVEST_SOURCES_FILE (default: data/sources.yaml).\n"
    '# Fields: see README "Source registry". Values may use ${ENV_VAR} or ${ENV_VAR:-default}.\n'
)


def _yaml() -> YAML:
    yaml = YAML()  # round-trip
    yaml.indent(mapping=2, sequence=4, offset=2)  # the shipped file's layout: "  - id: ..."
    yaml.preserve_quotes = True
    yaml.width = 4096  # never fold a long URL or filter
    return yaml


def _read(path: Path) -> tuple[YAML, Any]:
    yaml = _yaml()
    if not path.exists():
        doc = yaml.load(HEADER + "sources: []\n")
        return yaml, doc
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"))
    except Exception as exc:  # noqa: BLE001 - ruamel raises several unrelated types
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    if doc is None:
        doc = yaml.load(HEADER + "sources: []\n")
    if not isinstance(doc, CommentedMap) or not isinstance(doc.get("sources"), CommentedSeq):
        raise ConfigError(f"{path}: expected a top-level 'sources:' list")
    return yaml, doc


def _write_validated(path: Path, yaml: YAML, doc: Any) -> list[SourceConfig]:
    buffer = io.StringIO()
    yaml.dump(doc, buffer)
    path.parent.mkdir(parents=True, exist_ok=True)
    staged = path.with_name(f".{path.name}.{os.getpid()}.new")
    staged.write_text(buffer.getvalue(), encoding="utf-8")
    try:
        sources = load_sources(staged)
    except ConfigError as exc:
        staged.unlink(missing_ok=True)
        raise ConfigError(str(exc).replace(str(staged), str(path)), hint="the file was left as it was") from None
    os.replace(staged, path)
    return sources


@contextmanager
def _editing(path: Path):
    """One edit at a time (a CLI `add` and a UI `register_source` run at once read, then write)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def source_ids(path: str | Path | None = None) -> list[str]:
    _, doc = _read(Path(path) if path else sources_file_path())
    return [str(entry.get("id")) for entry in doc["sources"] if isinstance(entry, dict)]


def add_source(
    entry: dict[str, Any], *, note: str | None = None, path: str | Path | None = None,
    added_by: str = "`harvest-pipeline sources add`",
) -> SourceConfig:
    """Append one source (fields as in the file) and return it as loaded; the id must be new."""
    path = Path(path) if path else sources_file_path()
    with _editing(path):
        return _add(path, entry, note, added_by)


def _add(path: Path, entry: dict[str, Any], note: str | None, added_by: str) -> SourceConfig:
    yaml, doc = _read(path)
    source_id = entry.get("id")
    if any(isinstance(e, dict) and e.get("id") == source_id for e in doc["sources"]):
        raise ConfigError(f"{path}: source '{source_id}' exists already", hint="pick another id, or remove it first")
    item = CommentedMap()
    for key, value in entry.items():
        if value is not None:
            item[key] = _plain(value)
    sources: CommentedSeq = doc["sources"]
    sources.append(item)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    comment = f"added by {added_by} on {stamp}" + (f": {note}" if note else "")
    # A blank line and a comment above the new entry, like the entries written by hand.
    sources.yaml_set_comment_before_after_key(len(sources) - 1, before="\n" + comment, indent=2)
    loaded = _write_validated(path, yaml, doc)
    return next(s for s in loaded if s.id == source_id)


def remove_source(source_id: str, *, path: str | Path | None = None) -> None:
    """Delete the source's lines and the comment lines directly above it; the rest stays as is.

    Cut as text: ruamel keeps a comment above an entry with the entry before it, so deleting the
    item from the document would drop the next entry's comment and keep the removed one's.
    """
    path = Path(path) if path else sources_file_path()
    with _editing(path):
        _remove(path, source_id)


def _remove(path: Path, source_id: str) -> None:
    _, doc = _read(path)
    sources: CommentedSeq = doc["sources"]
    index = next((i for i, e in enumerate(sources) if isinstance(e, dict) and e.get("id") == source_id), None)
    if index is None:
        known = ", ".join(str(e.get("id")) for e in sources if isinstance(e, dict)) or "none"
        raise ConfigError(f"{path}: no source '{source_id}' (sources: {known})")
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    first, _ = sources.lc.item(index)  # 0-based line of the entry's first key, after its "- "
    dash = len(lines[first]) - len(lines[first].lstrip(" "))  # the column of that "- "

    def level(line: str) -> int:
        return len(line) - len(line.lstrip(" "))

    def at_entry_level(line: str) -> bool:  # blank, or a comment no deeper than the "- "
        return not line.strip() or (line.lstrip().startswith("#") and level(line) <= dash)

    end = first + 1
    while end < len(lines) and (not lines[end].strip() or lines[end].lstrip().startswith("#") or level(lines[end]) > dash):
        end += 1
    while end > first + 1 and at_entry_level(lines[end - 1]):
        end -= 1  # the next entry's comments and the blank line before them stay
    start = first
    while start > 0 and lines[start - 1].strip() and lines[start - 1].lstrip().startswith("#") and level(lines[start - 1]) == dash:
        start -= 1
    if start > 0 and not lines[start - 1].strip():
        start -= 1  # the blank line that separated it
    elif end < len(lines) and not lines[end].strip():
        end += 1  # the first entry: the blank line after it goes instead
    text = "".join(lines[:start] + lines[end:])
    yaml = _yaml()
    doc = yaml.load(text)
    if isinstance(doc, CommentedMap) and doc.get("sources") is None:
        doc["sources"] = CommentedSeq()  # the last source went: keep a valid, empty list
    _write_validated(path, yaml, doc)


def _plain(value: Any) -> Any:
    """Nested dicts as block mappings in the file."""
    if isinstance(value, dict):
        out = CommentedMap()
        for k, v in value.items():
            if v is not None:
                out[k] = _plain(v)
        return out
    return value
