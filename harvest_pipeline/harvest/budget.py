"""The budget of one traversal (a window, a full harvest, a reconciliation listing).

Every traversal is bounded, whatever the server says (``traversal:`` of the source, see
:class:`~harvest_pipeline.sources.registry.TraversalLimits`). Each guard has a name, and
:class:`~harvest_pipeline.errors.BudgetExceeded` carries it:

* ``token-too-long``: a resumption token longer than ``max_token_bytes`` (a token that grows
  every page would otherwise grow memory without end);
* ``repeated-token``: a token seen before in the traversal, also after others (A-B-A); tokens are
  kept as 16-byte digests, so the memory stays small however long the list;
* ``count-overflow``: more records than ``size_slack`` times the announced size (completeListSize,
  numberOfRecordsMatched), plus 100;
* ``page-limit``: more pages than the announced size needs at the first page's size, times
  ``size_slack``, plus 10; never more than ``max_pages``;
* ``record-limit``: more than ``max_records`` records;
* ``time-limit``: the traversal ran ``max_seconds``. The transport enforces it too
  (:func:`bind_time_budget`), so no request, retry or backoff runs past it.
"""

from __future__ import annotations

import hashlib
import math
import time

from harvest_pipeline.errors import BudgetExceeded
from harvest_pipeline.sources.registry import TraversalLimits


def token_digest(token: str) -> bytes:
    return hashlib.blake2b(token.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def bind_time_budget(lister, limits: TraversalLimits, started: float) -> None:
    """Make the lister's transport refuse any request past ``started + limits.max_seconds``."""
    transport = getattr(getattr(lister, "client", None), "transport", None)
    if transport is not None and hasattr(transport, "set_time_budget"):
        transport.set_time_budget(started + limits.max_seconds,
                                  f"the traversal's time budget (traversal.max_seconds = {limits.max_seconds:g} s)")


class TraversalBudget:
    """Checks each page of one traversal against ``limits`` (see the module doc)."""

    def __init__(self, limits: TraversalLimits | None = None, *, received_before: int = 0,
                 started: float | None = None, clock=time.monotonic):
        self.limits = limits or TraversalLimits()
        self.received = received_before
        self.pages = 0
        self.page_size: int | None = None  # records on the first page that had any
        self._seen: set[bytes] = set()
        self._clock = clock
        self.started = clock() if started is None else started

    def check(self, page, complete_list_size: int | None, pages_done: int | None = None) -> None:
        """Raise BudgetExceeded naming the guard if ``page`` goes beyond the budget."""
        lim = self.limits
        self.pages = pages_done if pages_done is not None else self.pages + 1
        n = len(page.records) + len(getattr(page, "quarantined", ()))
        self.received += n
        if self.page_size is None and n:
            self.page_size = n
        token = page.next_token
        if token is not None:
            size = len(token.encode("utf-8", "surrogatepass"))
            if size > lim.max_token_bytes:
                raise BudgetExceeded(
                    "token-too-long", f"the resumption token of page {self.pages} is {size} bytes, "
                    f"more than traversal.max_token_bytes = {lim.max_token_bytes}", url=page.url,
                    hint="a token that grows every page never ends; report it to the server's "
                         "maintainers, or raise traversal.max_token_bytes if its tokens are "
                         "legitimately long",
                )
            digest = token_digest(token)
            if digest in self._seen:
                raise BudgetExceeded(
                    "repeated-token", f"the server sent token {token[:200]!r} twice in one "
                    f"traversal (page {self.pages})", url=page.url,
                    hint="the server loops; report it to its maintainers",
                )
            self._seen.add(digest)
        if complete_list_size is not None:
            slack = lim.size_slack
            if self.received > complete_list_size * slack + 100:
                raise BudgetExceeded(
                    "count-overflow", f"received {self.received} records, far beyond the "
                    f"announced size {complete_list_size}", url=page.url,
                    hint="the server repeats records; report it",
                )
            per_page = max(self.page_size or 1, 1)
            page_budget = min(math.ceil(complete_list_size * slack / per_page) + 10, lim.max_pages)
            if self.pages > page_budget:
                raise BudgetExceeded(
                    "page-limit", f"{self.pages} pages for an announced size of "
                    f"{complete_list_size} at {per_page} record(s) per page (budget {page_budget} "
                    f"pages, traversal.max_pages = {lim.max_pages})", url=page.url,
                    hint="the server loops or its list is far larger than a window should be: "
                         "report it, use smaller windows, or raise traversal.max_pages",
                )
        elif self.pages > lim.max_pages:
            raise BudgetExceeded(
                "page-limit", f"more than traversal.max_pages = {lim.max_pages} pages and the "
                "server announced no size", url=page.url,
                hint="the server may list forever; report it, use smaller windows, or raise "
                     "traversal.max_pages",
            )
        if self.received > lim.max_records:
            raise BudgetExceeded(
                "record-limit", f"{self.received} records, more than traversal.max_records = "
                f"{lim.max_records}", url=page.url,
                hint="use smaller windows, or raise traversal.max_records for this source",
            )
        elapsed = self._clock() - self.started
        if elapsed > lim.max_seconds:
            raise BudgetExceeded(
                "time-limit", f"the traversal ran {elapsed:.0f} s, more than "
                f"traversal.max_seconds = {lim.max_seconds:g} s ({self.pages} pages, "
                f"{self.received} records)", url=page.url,
                hint="run it again later (a window resumes from its last page), use smaller "
                     "windows, or raise traversal.max_seconds",
            )
