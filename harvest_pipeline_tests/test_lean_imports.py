"""A process that harvests does not load pandas unless someone else asks for it (lean_imports.py).

Each case runs in a fresh interpreter: the test process itself has pandas loaded long ago.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

from harvest_pipeline.lean_imports import SWITCH_ENV
from harvest_pipeline_tests.conftest import day_window

# A real window harvest (HTTP to the demo provider, staging, merge, ledger) and then what the
# process has loaded; afterwards code outside the package imports pandas and hands DuckDB and
# pyarrow pandas values, which must work as usual.
_SCRIPT = textwrap.dedent("""
    import json, sys
    from datetime import datetime
    from harvest_pipeline.harvest import Window, harvest_window
    from harvest_pipeline.sources.registry import SourceConfig

    url, db, start, end = sys.argv[1:5]
    window = Window(datetime.fromisoformat(start), datetime.fromisoformat(end), start[:10])
    report = harvest_window(SourceConfig(id="demo", url=url), window, db_path=db)
    out = {"status": report.status, "created": report.counts.created, "pandas_after_harvest": "pandas" in sys.modules,
           "numpy_after_harvest": "numpy" in sys.modules}

    import duckdb, pandas, pyarrow
    frame = pandas.DataFrame({"n": [1, 2, 3]})
    con = duckdb.connect()
    out["duckdb_scans_a_frame"] = con.execute("SELECT sum(n) FROM frame").fetchone()[0]
    out["duckdb_takes_pandas_na"] = con.execute("SELECT ? IS NULL", [pandas.NA]).fetchone()[0]
    out["pyarrow_to_pandas"] = type(pyarrow.table({"n": [1]}).to_pandas()).__name__
    print("RESULT " + json.dumps(out))
""")


def _harvest_in_fresh_process(demo, db_path, **env) -> dict:
    window = day_window(2)
    proc = subprocess.run(
        [sys.executable, "-c", _SCRIPT, demo.url, str(db_path), window.start.isoformat(), window.end.isoformat()],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def test_a_window_harvest_loads_no_pandas_and_pandas_still_works_for_others(shared_demo, db_path):
    out = _harvest_in_fresh_process(shared_demo, db_path, **{SWITCH_ENV: ""})
    assert out["status"] == "verified" and out["created"] > 0
    assert out["pandas_after_harvest"] is False
    assert out["duckdb_scans_a_frame"] == 6
    assert out["duckdb_takes_pandas_na"] is True
    assert out["pyarrow_to_pandas"] == "DataFrame"


def test_the_switch_lets_duckdb_load_pandas_as_before(shared_demo, db_path):
    out = _harvest_in_fresh_process(shared_demo, db_path, **{SWITCH_ENV: "1"})
    assert out["status"] == "verified" and out["created"] > 0
    assert out["pandas_after_harvest"] is True
