"""Fetch the next page while the current one is written.

A window's time goes to waiting for the server and to storing pages. Running the page iterator
(HTTP + parse) in one background thread, a page or two ahead of the writer, overlaps the two:
requests, lxml and DuckDB all release the GIL while they work. Order is kept, and errors come
out at the place in the sequence where they happened, so the durable-cursor logic is unchanged.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Iterator, TypeVar

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
        self._worker = threading.Thread(target=self._work, name="page-prefetch", daemon=True)
        self._worker.start()

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

    def next_ready(self, timeout: float = 0.0) -> bool:
        """True if the next item is waiting now, or arrives within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self._items.empty():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(left, 0.005))
        return True

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
            self._worker.join(timeout=30)


def prefetch(iterator: Iterator[T], depth: int = 2) -> Prefetch:
    """The items of `iterator`, produced up to `depth` items ahead in a worker thread."""
    return Prefetch(iterator, depth)
