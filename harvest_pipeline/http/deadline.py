"""One wall-clock deadline per request attempt: connecting, sending, the headers and the body.

requests' timeouts bound each silence (every socket read), not the whole exchange: a server that
sends one byte every half second, headers or body, never trips them. Here a watchdog thread
shuts the attempt's socket down when its deadline passes; the blocked read returns at once and
the transport reports the deadline instead of whatever the broken read raised.

How the watchdog finds the socket: the transport's session gets :class:`DeadlineAdapter` for
``http://`` and ``https://`` (in place of requests' default adapter only; an adapter mounted by
the caller is kept). Its connections register themselves with the deadline armed by the calling
thread (:func:`armed`) each time they send a request, so a kept-alive connection is covered too.
One daemon thread serves every deadline of the process.
"""

from __future__ import annotations

import heapq
import itertools
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import requests
import requests.adapters
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

_local = threading.local()


class Deadline:
    """One attempt's deadline; :attr:`fired` tells whether the watchdog cut it off."""

    def __init__(self, at: float):
        self.at = at  # time.monotonic() value
        self.fired = False
        self._conn = None
        self._lock = threading.Lock()
        self._done = False

    @property
    def done(self) -> bool:
        return self._done

    def remaining(self) -> float:
        return self.at - time.monotonic()

    def attach(self, conn) -> None:
        with self._lock:
            self._conn = conn
        if self.remaining() <= 0:
            self.fire()

    def fire(self) -> None:
        with self._lock:
            if self._done:
                return
            self.fired = True
            # http.client drops conn.sock once a "Connection: close" response has its headers;
            # the socket object the body is read from is kept aside for us.
            sock = getattr(self._conn, "sock", None) or getattr(self._conn, "deadline_sock", None)
        if sock is not None:
            try:  # shutdown (not close) wakes a read blocked in another thread
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def disarm(self) -> None:
        with self._lock:
            self._done = True
            self._conn = None


class _Watchdog:
    """A single daemon thread firing deadlines in time order."""

    def __init__(self):
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Deadline]] = []
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, d: Deadline) -> None:
        with self._cond:
            if len(self._heap) > 256:  # drop deadlines already disarmed (most of them)
                self._heap = [e for e in self._heap if not e[2].done]
                heapq.heapify(self._heap)
            heapq.heappush(self._heap, (d.at, next(self._seq), d))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="http-deadline-watchdog",
                                                daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap:
                    self._cond.wait()
                at, _, d = self._heap[0]
                wait = at - time.monotonic()
                if wait > 0:
                    self._cond.wait(wait)
                    continue
                heapq.heappop(self._heap)
            d.fire()


_WATCHDOG = _Watchdog()


@contextmanager
def armed(at: float) -> Iterator[Deadline]:
    """Arm a deadline (a ``time.monotonic()`` value) for the requests this thread sends inside."""
    d = Deadline(at)
    previous = getattr(_local, "deadline", None)
    _local.deadline = d
    _WATCHDOG.add(d)
    try:
        yield d
    finally:
        d.disarm()
        _local.deadline = previous


def _register(conn) -> None:
    d = getattr(_local, "deadline", None)
    if d is not None:
        d.attach(conn)


class _DeadlineMixin:
    """Registers the connection with the calling thread's deadline, and keeps its socket."""

    deadline_sock = None

    def request(self, *args, **kwargs):  # every request, also on a kept-alive connection
        if self.sock is not None:
            self.deadline_sock = self.sock
        _register(self)
        return super().request(*args, **kwargs)

    def connect(self):
        super().connect()
        self.deadline_sock = self.sock
        _register(self)  # the socket exists now: a deadline that passed meanwhile fires on it


class _DeadlineHTTPConnection(_DeadlineMixin, HTTPConnection):
    pass


class _DeadlineHTTPSConnection(_DeadlineMixin, HTTPSConnection):
    pass


class _DeadlineHTTPPool(HTTPConnectionPool):
    ConnectionCls = _DeadlineHTTPConnection


class _DeadlineHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _DeadlineHTTPSConnection


_POOLS = {"http": _DeadlineHTTPPool, "https": _DeadlineHTTPSPool}


class DeadlineAdapter(requests.adapters.HTTPAdapter):
    """requests' HTTPAdapter whose connections obey the deadline armed by :func:`armed`."""

    def init_poolmanager(self, *args, **kwargs):
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = dict(_POOLS)

    def proxy_manager_for(self, proxy, **proxy_kwargs):
        manager = super().proxy_manager_for(proxy, **proxy_kwargs)
        manager.pool_classes_by_scheme = dict(_POOLS)
        return manager


def install(session: requests.Session) -> None:
    """Put :class:`DeadlineAdapter` on ``session`` where it still has requests' default adapter."""
    for prefix in ("http://", "https://"):
        current = session.adapters.get(prefix)
        if type(current) is requests.adapters.HTTPAdapter:
            session.mount(prefix, DeadlineAdapter())
