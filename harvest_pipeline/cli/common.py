"""Helpers shared by the CLI commands."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import date, datetime, timezone

PROGRESS_WIDTH = 78  # the progress line's width: each update overwrites the whole of the previous one


def parse_day(text: str) -> datetime:
    try:
        d = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a date: {text!r} (use YYYY-MM-DD or an ISO timestamp)") from None
    return d.replace(tzinfo=timezone.utc) if d.tzinfo is None else d.astimezone(timezone.utc)


def json_default(value):
    """JSON for the CLI's --json: datetimes as ISO 8601 UTC with `Z` (stored naive, always UTC)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(timezone.utc).replace(tzinfo=None)
        return value.isoformat() + "Z"
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def failure_cause(result) -> str:
    """Why a Dagster run failed, in one line: the error our code raised, not Dagster's wrapper.

    Dagster reports an op's exception as "Error occurred while executing op ..." with the
    real error as its cause (or context); `result` is an ExecuteInProcessResult.
    """
    error = next((e.step_failure_data.error for e in result.all_events if e.is_step_failure), None)
    if error is None:
        return "run failed"
    while error.cls_name.startswith("Dagster") and (error.cause or error.context):
        error = error.cause or error.context
    text = " ".join(line.strip() for line in error.message.splitlines() if line.strip())
    qualified, sep, rest = text.partition(": ")
    if not sep or not qualified.endswith(error.cls_name):
        return text or "run failed"
    # Our errors and dg.Failure say what happened in their own words; others need their class.
    if qualified.startswith("harvest_pipeline.") or error.cls_name == "Failure":
        return rest
    return f"{error.cls_name}: {rest}"


def cli_instance():
    """DAGSTER_HOME's instance, for the runs the CLI executes in its own process, without Dagster's
    capture of their stdout and stderr: that capture starts a `tail` and a Python watcher per run,
    in the terminal's process group, so Ctrl-C printed the watcher's KeyboardInterrupt traceback.
    The harvest logs through Dagster's event log, which the UI shows whole."""
    import dagster as dg
    from dagster._core.instance.ref import InstanceRef

    no_capture = {"compute_logs": {"module": "dagster._core.storage.noop_compute_log_manager",
                                   "class": "NoOpComputeLogManager"}}
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(os.environ["DAGSTER_HOME"], overrides=no_capture))


@contextmanager
def progress_line(describe: Callable[[dict], str]) -> Iterator[Callable[[], None]]:
    """While open, every progress event (harvest/progress.py) rewrites one terminal line with
    `describe(event)`; the line is cleared at the end, and by the function yielded (before a
    result line is printed). Nothing is shown when stdout is not a terminal."""
    from harvest_pipeline.harvest.progress import subscribe

    interactive = sys.stdout.isatty()

    def show(event: dict) -> None:
        if interactive:
            print("\r" + describe(event).ljust(PROGRESS_WIDTH), end="", flush=True)

    def clear() -> None:
        if interactive:
            print("\r" + " " * PROGRESS_WIDTH + "\r", end="")

    unsubscribe = subscribe(show)
    try:
        yield clear
    finally:
        unsubscribe()
        clear()
