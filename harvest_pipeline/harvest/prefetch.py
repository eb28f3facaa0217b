"""Fetch the next page while the current one is written, and ask for it while this one is mapped.

A window's time goes to waiting for the server, to mapping pages and to storing them. Two
overlaps, each keeping order and raising errors at the place in the sequence where they happened
(so the durable-cursor logic is unchanged):

* :func:`prefetch` runs the page pipeline (HTTP, parse, guards, mapping) in one background thread,
  a page or two ahead of the writer: requests, lxml and DuckDB all release the GIL while they work;
* :class:`FetchAhead` sends the request for page n+1 (and parses its answer) in another thread
  as soon as page n has passed its guards, while page n is mapped: the server prepares the next
  page while we map this one. It asks for nothing the plain loop would not have asked for: the
  next page is requested only when the caller says so, after its checks.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from concurrent.futures import wait as wait_for_futures
from typing import Iterator, TypeVar

from harvest_pipeline.harvest import background

T = TypeVar("T")
_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


class Prefetch:
    """The items of an iterator, produced up to `depth` items ahead in a worker thread.

    Iterate it once. `next_ready(timeout)` says whether the next item (or the end) is already
    waiting, so the consumer can do work that is free while it would wait anyway.
    """

    def __init__(self, iterator: Iterator[T], depth: int = 2):
        self._items: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._iterator = iterator
        self._worker = background.submit(self._work)

    def _work(self) -> None:
        items, stop = self._items, self._stop
        try:
            for item in self._iterator:
                while not stop.is_set():
                    try:
                        items.put(item, timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put(_DONE)
        except BaseException as exc:  # handed to the consumer, raised there
            items.put(_Failure(exc))
        finally:
            close = getattr(self._iterator, "close", None)
            if close is not None:  # a generator left early ends here, in its own thread
                try:
                    close()
                except BaseException:  # noqa: BLE001 - never hide what ended the loop
                    pass

    def next_ready(self, timeout: float = 0.0) -> bool:
        """True if the next item is waiting now, or arrives within `timeout` seconds."""
        items = self._items
        # The queue's own condition, woken by each put (no polling). Its lock is held here, so the
        # size is read with _qsize(): qsize() would take that lock again.
        with items.not_empty:
            return items.not_empty.wait_for(items._qsize, timeout=max(timeout, 0.0)) > 0

    def __iter__(self) -> Iterator[T]:
        try:
            while True:
                item = self._items.get()
                if item is _DONE:
                    return
                if isinstance(item, _Failure):
                    raise item.exc
                yield item
        finally:
            self._stop.set()
            wait_for_futures([self._worker], timeout=30)


def prefetch(iterator: Iterator[T], depth: int = 2) -> Prefetch:
    """The items of `iterator`, produced up to `depth` items ahead in a worker thread."""
    return Prefetch(iterator, depth)


class FetchAhead:
    """Pages of `pages` (a lazy iterator: each ``next`` sends one request), one request ahead.

    ``next()`` returns the next page (None at the end); ``request_next()`` starts asking for the
    page after it in a worker thread, to be returned by the following ``next()``. Without
    ``request_next()``, ``next()`` asks in the caller's thread: the requests sent are exactly
    those of a plain loop, only earlier. Errors are raised by the ``next()`` that returns that
    page. ``close()`` waits for a request in flight (the transport's own timeouts bound it), so
    that no request outlives the traversal.
    """

    def __init__(self, pages: Iterator[T]):
        self._pages = iter(pages)
        self._pending: Future | None = None

    def request_next(self) -> None:
        if self._pending is None:
            self._pending = background.submit(next, self._pages, None)

    def next(self):
        pending, self._pending = self._pending, None
        return pending.result() if pending is not None else next(self._pages, None)

    def close(self) -> None:
        pending, self._pending = self._pending, None
        if pending is not None:
            try:
                pending.result()
            except BaseException:  # noqa: BLE001 - the traversal ends anyway; nobody reads this page
                pass
        close = getattr(self._pages, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> "FetchAhead":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
