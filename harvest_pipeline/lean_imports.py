"""Keeps pandas out of the processes that harvest: DuckDB and pyarrow would import it for nothing.

DuckDB's Python client imports pandas (and numpy) at the first statement with parameters, only to
ask whether a parameter is a pandas value; pyarrow does the same when it builds a table. The
project never hands either a pandas value, yet the import cost every process that opens the
catalogue about 40 MB of memory and 0.35 s of CPU (a third of a window harvest's distance from
the 250 MB of issue 10; bench --rss). So an import of pandas asked for while the project's own
code is the innermost Python frame (DuckDB and pyarrow ask from C, so their caller's frame is
ours) is refused, and both go on without it; neither caches the refusal.

Nothing else changes: code that imports pandas itself (any frame outside this package) gets it,
and DuckDB and pyarrow use it from then on, since an imported module is never looked for again.
``HARVEST_LOAD_PANDAS=1`` switches the refusal off.

For this package's own code that means: no `import pandas`, and no DuckDB call that needs it
(`.df()`, scanning a DataFrame); such a call fails with this module's message. None does.
"""

from __future__ import annotations

import os
import sys

SWITCH_ENV = "HARVEST_LOAD_PANDAS"
_REFUSED = "pandas"
_OURS = __name__.split(".")[0] + "."
_IMPORT_MACHINERY = ("<frozen importlib", "<frozen zipimport")


class _RefusePandasForUs:
    """A meta path finder that says pandas is absent to imports the project's code asks for."""

    def find_spec(self, name, path=None, target=None):
        if name != _REFUSED:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith(_IMPORT_MACHINERY):
            frame = frame.f_back
        if frame is None or not str(frame.f_globals.get("__name__", "")).startswith(_OURS):
            return None  # someone else's import: found as usual
        raise ModuleNotFoundError(f"pandas is not loaded for {_OURS[:-1]}'s own statements "
                                  f"(set {SWITCH_ENV}=1 to allow it)", name=name)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: see {__name__}>"


def install() -> None:
    """Put the finder first on `sys.meta_path`, once per process, unless switched off."""
    if os.environ.get(SWITCH_ENV, "").strip().lower() in ("1", "true", "yes"):
        return
    if not any(isinstance(f, _RefusePandasForUs) for f in sys.meta_path):
        sys.meta_path.insert(0, _RefusePandasForUs())
