"""Fetch the next page while the current one is written.

A window's time goes to waiting for the server and to storing pages. Running the page iterator
(HTTP + parse) in one background thread, a page or two ahead of the writer, overlaps the two:
requests, lxml and DuckDB all release the GIL while they work. Order is kept, and errors come
out at the place in the sequence where they happened, so the durable-cursor logic is unchanged.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, TypeVar

T = TypeVar("T")
_DONE = object()


class _Failure:
    def __init__(self, exc: BaseException):
        self.exc = exc


def prefetch(iterator: Iterator[T], depth: int = 2) -> Iterator[T]:
    """Yield the items of `iterator`, produced up to `depth` items ahead in a worker thread."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def work() -> None:
        try:
            for item in iterator:
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

    worker = threading.Thread(target=work, name="page-prefetch", daemon=True)
    worker.start()
    try:
        while True:
            item = items.get()
            if item is _DONE:
                return
            if isinstance(item, _Failure):
                raise item.exc
            yield item
    finally:
        stop.set()
        worker.join(timeout=30)
