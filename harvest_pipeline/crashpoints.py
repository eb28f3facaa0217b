"""Named places where a test can make this process die by SIGKILL, to prove crash safety.

Set HARVEST_CRASHPOINT=<name>[:<n>] and the n-th time (default 1st) the harvest passes that
place, the process kills itself with SIGKILL: no cleanup, no finally blocks, like a power cut.
Unset (always, outside tests), `crashpoint()` is one dict lookup.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "after-fetch",  # a page was fetched and parsed, nothing of it written yet
    "mid-page-write",  # a staging commit's page files are written, its cursor not yet
    "mid-merge",  # inside the catalogue transaction, after the upsert, before commit
    "after-merge",  # the merge committed, the staging folder not yet removed
)

_spec = os.environ.get("HARVEST_CRASHPOINT", "")
_name, _, _nth = _spec.partition(":")
_remaining = int(_nth or 1)


def crashpoint(name: str) -> None:
    global _remaining
    if name != _name:
        return
    _remaining -= 1
    if _remaining == 0:
        os.kill(os.getpid(), signal.SIGKILL)
