"""Records whose header lies in ways the demo provider does not model, served over 127.0.0.1 by a
scripted server and harvested into a real catalogue."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from harvest_pipeline.harvest import Window, harvest_window
from harvest_pipeline.sources.registry import SourceConfig
from harvest_pipeline.store import connect, ledger

from .scripted_server import record, scripted_oai

pytestmark = pytest.mark.integration

DAY = datetime(2026, 11, 1, tzinfo=timezone.utc)
WINDOW = Window(DAY, DAY + timedelta(days=1), "2026-11-01")


def _source(server) -> SourceConfig:
    return SourceConfig(id="scripted", url=server.url)


def test_an_identifier_repaired_of_a_nul_never_merges_into_the_real_one(db_path):
    page = [record("nul\x00byte", "2026-11-01T01:00:00Z", "with a NUL"),
            record("nulbyte", "2026-11-01T02:00:00Z", "the real one")]
    with scripted_oai([page]) as server:
        report = harvest_window(_source(server), WINDOW, db_path=db_path)
    assert report.status == ledger.VERIFIED
    with connect(db_path) as con:
        rows = con.execute("SELECT identifier, title FROM records ORDER BY identifier").fetchall()
        flagged = con.execute("SELECT identifier, kind, raw FROM quarantine").fetchall()
    assert sorted(rows) == sorted([("nul\u2400byte", "with a NUL"), ("nulbyte", "the real one")])
    assert flagged == [("nul\u2400byte", "identifier", b"nul\x00byte")]
    assert any("kept apart" in w for w in report.warnings)
