"""The one error the metadata mappers raise: a payload we cannot turn into a NormalizedRecord."""

from __future__ import annotations

from harvest_pipeline.errors import HarvestError


class MappingError(HarvestError):
    """No mapper for this payload's root, or the mapper could not read the record.

    `format_name` is the registered format (None when no mapper matched) and `root` the payload
    root in Clark notation (`{namespace}local`), so the caller can log or quarantine the record
    without re-inspecting the XML.
    """

    def __init__(self, message: str, *, format_name: str | None = None, root: str | None = None, **kw):
        super().__init__(message, **kw)
        self.format_name = format_name
        self.root = root
