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


def test_a_far_future_datestamp_is_flagged_and_does_not_block_later_updates(db_path):
    # 1. The server stamps a version 9999-01-01 while its own clock says 2026-11-02.
    first = [record("oai:x:1", "9999-01-01T00:00:00Z", "placeholder date"),
             record("oai:x:2", "2026-11-01T03:00:00Z", "ordinary")]
    with scripted_oai([first], response_date="2026-11-02T00:00:00Z") as server:
        report = harvest_window(_source(server), WINDOW, db_path=db_path)
    assert report.status == ledger.VERIFIED
    assert any("later than the server's clock" in w and "oai:x:1" in w for w in report.warnings)
    with connect(db_path) as con:
        stored = con.execute("SELECT datestamp, datestamp_raw, title FROM records WHERE identifier = 'oai:x:1'").fetchone()
        flagged = con.execute("SELECT identifier, kind, raw FROM quarantine").fetchall()
    assert stored == (datetime(2026, 11, 2), "9999-01-01T00:00:00Z", "placeholder date")
    assert flagged == [("oai:x:1", "datestamp", b"9999-01-01T00:00:00Z")]

    # 2. A real update a day later wins, and an older version is still stale.
    second = [record("oai:x:1", "2026-11-02T12:00:00Z", "real update"),
              record("oai:x:2", "2026-10-30T00:00:00Z", "older than stored")]
    with scripted_oai([second], response_date="2026-11-03T00:00:00Z") as server:
        report = harvest_window(_source(server), WINDOW, db_path=db_path)
    assert (report.counts.updated, report.counts.stale) == (1, 1)
    with connect(db_path) as con:
        rows = con.execute("SELECT identifier, datestamp_raw, title FROM records ORDER BY identifier").fetchall()
    assert rows == [("oai:x:1", "2026-11-02T12:00:00Z", "real update"), ("oai:x:2", "2026-11-01T03:00:00Z", "ordinary")]
