"""How many sources one process may harvest at once, given how many files it may open.

Each source a batch run harvests holds about five file descriptors while it works (its source and
window locks, its host's politeness slot, its HTTP connection, its staged page), 4.6 measured
(bench --many-sources: 124 at 20 sources, 488 at 100). A process's limit is often lower than a
batch run needs: 1,024 on many Linux systems, 256 on macOS. At 256 a run of 100 sources failed 217
of its 300 windows with "Too many open files" before this module (nothing was lost, they were
harvested again later, but slowly and with misleading errors).

So a batch run first raises its own soft limit toward the hard one (allowed without privileges),
and if that is still too low it harvests only as many sources at a time as the limit allows,
saying so. No Dagster here: the CLI could use it as well.
"""

from __future__ import annotations

import errno

# Descriptors per source being harvested (4.6 measured, with room) and for the rest of the
# process (33 measured: Dagster's event log, the catalogue, logs; with room).
FDS_PER_SOURCE = 6
RESERVED_FDS = 64
# macOS refuses a soft limit above OPEN_MAX even when the hard limit says "unlimited".
_MACOS_OPEN_MAX = 10_240

OUT_OF_FILES = (errno.EMFILE, errno.ENFILE)


def files_needed(sources: int) -> int:
    """Descriptors a process harvesting `sources` sources at once should be allowed."""
    return RESERVED_FDS + FDS_PER_SOURCE * sources


def open_file_limit() -> int | None:
    """This process's soft limit on open files; None where there is none to read (Windows)."""
    try:
        import resource
    except ImportError:
        return None
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    return None if soft == resource.RLIM_INFINITY else soft


def raise_open_file_limit(wanted: int) -> int | None:
    """Raise the soft limit on open files to `wanted`, or as near as the hard limit allows.

    Returns the soft limit now in effect (None: no limit to read). Never lowers it."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    if soft >= wanted:
        return soft
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    for candidate in (target, min(target, _MACOS_OPEN_MAX)):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (candidate, hard))
            return candidate
        except (ValueError, OSError):
            continue
    return soft


def sources_at_once(sources: int) -> tuple[int, int | None]:
    """(how many of `sources` sources one process should harvest at a time, its open-file limit).

    Raises the process's soft limit first (see raise_open_file_limit)."""
    limit = raise_open_file_limit(files_needed(sources))
    if limit is None:
        return sources, None
    return max(1, min(sources, (limit - RESERVED_FDS) // FDS_PER_SOURCE)), limit


def limit_hint(limit: int | None = None) -> str:
    """What to do when a process runs out of file descriptors."""
    limit = open_file_limit() if limit is None else limit
    now = f" (now {limit})" if limit else ""
    return (f"this process has too many files open: raise its limit{now} with `ulimit -n` in the shell that "
            f"starts Dagster or the CLI (about {FDS_PER_SOURCE} per source harvested at once, plus {RESERVED_FDS}), "
            "or lower HARVEST_SOURCES_PER_RUN; nothing is wrong with the window, run it again")
