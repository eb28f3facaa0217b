"""The next window's first page, asked for as soon as this window's list has ended.

When a run harvests consecutive windows of a source (`harvest/sequence.py`), window N's last page
still has to be mapped and committed after its response came. With a hundred sources answering
at the same moment that took 0.7-1.8 s per source (measured in the 100-source bench), and the
server waited for the next window's first request all that time. So once window N's last page
has passed its guards, window N+1's first request is sent from a helper thread; N+1's token loop
takes that page (and the listing it began) instead of sending the same request again.

Nothing else changes: the request goes through the same lister, transport and politeness gates,
the source still has one request in flight at a time (N's list has ended), and the page is staged
by N+1's traversal like any other, so a crash loses nothing that was committed. The request is
only wasted when window N+1 does not start afresh after all (a stop, another run holding it); a
page that N+1 does not ask for with the same bounds is dropped, and N+1 sends its own request. A
request that failed is N+1's failure, raised in its token loop (the same request, after the same
retries, would have failed there); it runs under N+1's time budget, bound when it is sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Callable

from harvest_pipeline.harvest import background
from harvest_pipeline.harvest.listers import Lister
from harvest_pipeline.pages import ListPage


class EarlyFirstPage:
    """One window's first page, fetched ahead by `start`, taken once by its token loop (`take`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bounds: tuple[str | None, str | None] | None = None
        self._future: Future | None = None
        self._taken = False

    def start(self, lister: Lister, from_param: str | None, until_param: str | None) -> None:
        """Send the listing's first request in a helper thread (once; later calls do nothing)."""
        with self._lock:
            if self._future is not None or self._taken:
                return
            self._bounds = (from_param, until_param)
            self._future = future = Future()
        pages = lister.pages(from_param=from_param, until_param=until_param, resume_token=None)

        def fetch() -> None:
            try:
                first = next(pages, None)
            except BaseException as exc:  # noqa: BLE001 - the window sends its own request instead
                pages.close()
                future.set_exception(exc)
                return
            future.set_result((first, pages))  # a listing discarded meanwhile is closed by its callback

        background.submit(fetch)

    def take(self, from_param: str | None, until_param: str | None, resume_token: str | None) -> Iterator[ListPage] | None:
        """The listing begun by `start` (its first page first), if it is the one asked for now:
        same bounds, from the start. None otherwise, and then never again."""
        with self._lock:
            future, self._future, self._taken = self._future, None, True
        if future is None:
            return None
        if resume_token is not None or self._bounds != (from_param, until_param):
            future.add_done_callback(_close_listing)
            return None
        try:
            first, pages = future.result()
        except Exception as exc:  # noqa: BLE001 - raised where the window's own request would have raised it
            return _failed(exc)
        return _chain(first, pages)

    def discard(self) -> None:
        """Not wanted after all (the run stops, the window is not harvested): the listing is closed
        when its request ends."""
        with self._lock:
            future, self._future, self._taken = self._future, None, True
        if future is not None:
            future.add_done_callback(_close_listing)


def _close_listing(future: Future) -> None:
    if future.exception() is None:
        future.result()[1].close()


def _failed(exc: Exception) -> Iterator[ListPage]:
    # The answer the window would have had to its own first request (after the transport's
    # retries): asking again would double the load on a failing server, or ignore its Retry-After.
    raise exc
    yield  # a generator: raised at the first next(), inside the window's token loop


def _chain(first: ListPage | None, pages: Iterator[ListPage]) -> Iterator[ListPage]:
    try:
        if first is None:
            return
        yield first
        yield from pages
    finally:
        pages.close()


OnListEnd = Callable[[], None]
