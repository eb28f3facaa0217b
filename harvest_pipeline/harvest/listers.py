"""Protocol adapters: how a window's pages are listed, one class per protocol.

The window pipeline (staging, merge, checks) is the same for every protocol; a lister only knows
how to turn a window into request bounds and how to walk its pages from a resume point. Pages
are `ListPage`s: records, the token of the next page (None at the end) and the total size the
server announced (OAI-PMH completeListSize, CSW numberOfRecordsMatched).
"""

from __future__ import annotations

from typing import Iterator, Protocol

from harvest_pipeline.dates import window_to_oai_bounds
from harvest_pipeline.oai.client import OAIClient
from harvest_pipeline.oai.models import ListPage
from harvest_pipeline.sources import SourceConfig


class Lister(Protocol):
    def describe(self) -> dict:
        """What the server says about itself, for `source_state` (granularity, earliest, deletions)."""

    def bounds(self, start, end) -> tuple[str | None, str | None]:
        """The request's from/until for [start, end); (None, None) lists everything."""

    def pages(self, *, from_param: str | None, until_param: str | None, resume_token: str | None) -> Iterator[ListPage]:
        """Pages from the first request (resume_token None) or from a stored token."""


class OaiLister:
    def __init__(self, source: SourceConfig, client: OAIClient | None = None):
        self.source = source
        self.client = client or OAIClient(
            source.url,
            headers=source.http_headers(),
            auth=source.http_auth(),
            timeout=source.http.timeout_seconds,
        )
        self._identify = None

    def describe(self) -> dict:
        if self._identify is None:
            self._identify = self.client.identify()
        info = self._identify
        return {
            "granularity": info.granularity,
            "earliest_datestamp": info.earliest_datestamp,
            "deleted_record": info.deleted_record,
        }

    def bounds(self, start, end) -> tuple[str | None, str | None]:
        granularity = self.describe()["granularity"]
        b = window_to_oai_bounds(start, end, granularity)
        return b[0], b[1]

    def pages(self, *, from_param, until_param, resume_token) -> Iterator[ListPage]:
        return self.client.list_records_pages(
            self.source.metadata_prefix, from_=from_param, until=until_param, set_=self.source.set,
            resumption_token=resume_token,
        )


def lister_for(source: SourceConfig) -> Lister:
    if source.protocol == "csw":
        from harvest_pipeline.harvest.csw_lister import CswLister  # added with CSW support

        return CswLister(source)
    return OaiLister(source)
