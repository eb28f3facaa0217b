"""Stopping a harvest cleanly: SIGTERM or SIGINT ends it at the next page boundary.

The CLI calls `install()`: from then on the first SIGTERM/SIGINT only sets a process-wide flag.
The token loop checks it after each committed page (and its prefetch thread before each request)
and raises `HarvestStopped`; a ranged run starts no further window. A second signal aborts at once
(KeyboardInterrupt), for an operator who will not wait for a slow server's page.

Dagster's in-process execution replaces the signal handlers while a step runs, with one that
raises wherever the step happens to be (mid-page). `handling_signals()` puts ours back for the
duration of the harvest, only in a process whose CLI installed them: runs launched by the daemon
or the UI keep Dagster's own termination.
"""

from __future__ import annotations

import signal
import sys
import threading
from contextlib import contextmanager
from typing import Iterator

from harvest_pipeline.errors import HarvestError

SIGNALS = (signal.SIGTERM, signal.SIGINT)

_state = {"signal": None, "installed": False}


class HarvestStopped(HarvestError):
    """The operator asked the harvest to stop (SIGTERM/SIGINT); what was received is committed."""

    def __init__(self, message: str, *, signum: int, **kw):
        super().__init__(message, **kw)
        self.signum = signum


def requested() -> int | None:
    """The signal that asked for a stop, or None."""
    return _state["signal"]


# A signal that reached Dagster's handler instead of ours (between a run's steps): Dagster maps
# SIGTERM and SIGINT to one handler that does not keep which one it was.
UNKNOWN_SIGNAL = 0


def signal_name(signum: int | None) -> str:
    if signum == UNKNOWN_SIGNAL:
        return "a signal (SIGINT or SIGTERM)"
    return signal.Signals(signum).name if signum else "a stop request"


def exit_code(signum: int) -> int:
    """The shell's convention for a process ended by a signal: 128 + its number (143, 130); 130
    for a signal of unknown kind (an interrupt)."""
    return 128 + (signum or signal.SIGINT)


def request(signum: int = signal.SIGTERM) -> None:
    if _state["signal"] is None:
        _state["signal"] = signum


def clear() -> None:
    _state["signal"] = None


def _handler(signum, _frame) -> None:
    if _state["signal"] is not None:
        raise KeyboardInterrupt  # a second signal: the operator will not wait
    _state["signal"] = signum
    print(
        f"\n{signal_name(signum)} received: stopping after the current page "
        "(send it again to abort at once)", file=sys.stderr, flush=True,
    )


def install() -> None:
    """Make SIGTERM and SIGINT stop harvests in this process at the next page boundary."""
    if threading.current_thread() is not threading.main_thread():
        return
    for signum in SIGNALS:
        signal.signal(signum, _handler)
    _state["installed"] = True


@contextmanager
def handling_signals() -> Iterator[None]:
    """Our handlers for the duration of a harvest (see the module's note); the previous ones after."""
    if not _state["installed"] or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    for signum in SIGNALS:
        signal.signal(signum, _handler)
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def check(*, source_id: str, window: str, pages: int) -> None:
    """Raise HarvestStopped if a stop was requested (call it at a page boundary)."""
    signum = requested()
    if signum is None:
        return
    raise HarvestStopped(
        f"stopped by {signal_name(signum)} after {pages} committed page(s) of this window",
        signum=signum, source_id=source_id, window=window,
        hint="run the same command again; it resumes from the last committed page",
    )


def until_stopped(pages: Iterator) -> Iterator:
    """`pages`, but no further request once a stop was requested."""
    for page in pages:
        yield page
        if requested() is not None:
            return
