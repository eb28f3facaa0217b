"""Background calls for the harvest's helper work, on threads that stay for the next call.

A window used to start three threads of its own (its page pipeline, its next-page request, the
next window's first request) and each source a merge thread. With a hundred sources in one
process the harvest threads keep Python's GIL busy, and starting a thread waits until the new
thread has held the GIL once: a median 15-110 ms, up to 1.3 s, spent by the window that started
it. `ThreadPoolExecutor` starts its threads under a lock that every pool of the process shares,
so those waits also held up every other source's next request (p90 0.98 s per submit; a /tmp
trace of 100 latency-bound sources, see "Seventeenth round" in bench/ROUNDS.md).

Here a thread that finishes a call waits for the next one, so after the first windows no thread
is started, and a thread is started under no lock that another submitter needs. Idle threads
end after `IDLE_SECONDS`. They are daemon threads: they do not hold up the interpreter's exit,
so the callers wait for what they submitted (every user here does).
"""

from __future__ import annotations

import os
import queue
import threading
from collections import deque
from concurrent.futures import Future
from typing import Callable

# An idle thread ends after this long: a run's next windows reuse it, an idle process keeps none.
IDLE_SECONDS = 60.0
THREAD_NAME = "harvest-background"


def _run(future: Future, fn: Callable, args: tuple, kwargs: dict) -> None:
    if not future.set_running_or_notify_cancel():
        return
    try:
        result = fn(*args, **kwargs)
    except BaseException as exc:  # noqa: BLE001 - handed to whoever waits for the future
        future.set_exception(exc)
    else:
        future.set_result(result)


class _Threads:
    """Calls run as soon as submitted, each on an idle thread or a new one."""

    def __init__(self) -> None:
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # threads waiting for a call and not yet promised one

    def submit(self, fn: Callable, *args, **kwargs) -> Future:
        future: Future = Future()
        with self._lock:
            start = self._idle == 0
            if not start:
                self._idle -= 1  # that thread's next call is this one (or an equal one)
        self._calls.put((future, fn, args, kwargs))
        if start:
            try:
                threading.Thread(target=self._serve, name=THREAD_NAME, daemon=True).start()
            except BaseException:
                future.cancel()  # a thread that comes later skips it
                raise
        return future

    def _serve(self) -> None:
        calls = self._calls
        while True:
            try:
                call = calls.get(timeout=IDLE_SECONDS)
            except queue.Empty:
                with self._lock:
                    if self._idle > 0:  # no call promised to an idle thread: this one may go
                        self._idle -= 1
                        return
                continue  # a call was promised meanwhile: it is on its way
            _run(*call)
            del call  # the finished call's arguments and result are not kept alive while idle
            with self._lock:
                self._idle += 1


_threads = _Threads()


def _new_threads_after_fork() -> None:
    # A forked child has none of the parent's threads (and maybe a held lock): start afresh.
    global _threads
    _threads = _Threads()


os.register_at_fork(after_in_child=_new_threads_after_fork)


def submit(fn: Callable, *args, **kwargs) -> Future:
    """Run fn(*args, **kwargs) on a background thread; its result or exception in the future."""
    return _threads.submit(fn, *args, **kwargs)


class InOrder:
    """Calls run one at a time, in the order submitted, on the background threads (a source's
    merges: window N's before N+1's). The same interface as a one-thread `ThreadPoolExecutor`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque = deque()
        self._running = False
        self._last: Future | None = None

    def submit(self, fn: Callable, *args, **kwargs) -> Future:
        future: Future = Future()
        with self._lock:
            self._queue.append((future, fn, args, kwargs))
            self._last = future
            if self._running:
                return future
            self._running = True
        submit(self._drain)
        return future

    def _drain(self) -> None:
        while True:
            with self._lock:
                if not self._queue:
                    self._running = False
                    return
                call = self._queue.popleft()
            _run(*call)

    def shutdown(self, wait: bool = True) -> None:
        """Wait for every call submitted so far (they are never cancelled)."""
        with self._lock:
            last = self._last
        if wait and last is not None:
            # In order: the last call done means every call before it is done.
            last.exception()
