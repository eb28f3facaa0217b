"""harvest_pipeline: keeps a local DuckDB catalogue in step with OAI-PMH repositories.

The protocol core (oai/, formats/, store/, harvest/) has no Dagster imports; defs/ is the
Dagster glue and demo/ the local data provider used by the demo and the tests.
"""

import os as _os

# Arrow's buffers (a page's columns, the Parquet writer's) come from glibc's malloc rather than
# Arrow's default mimalloc, which keeps a heap per thread: 100 sources harvested from the threads of
# one process held 1.2 GB in them and spent about a tenth of the CPU zeroing their huge pages
# (perf); with glibc's, 0.6 GB and 12% less CPU. Read by Arrow when it is first imported, so it is
# set here; a value the user gives wins.
_os.environ.setdefault("ARROW_DEFAULT_MEMORY_POOL", "system")

# DuckDB and pyarrow would import pandas (40 MB, 0.35 s) at the catalogue's first statement with
# parameters; the project never gives them a pandas value (lean_imports.py says more).
from harvest_pipeline import lean_imports as _lean_imports  # noqa: E402 - after the Arrow setting above

_lean_imports.install()
