"""Stored records mapped again from their raw XML (harvest/remap.py), after a mapper changed.

The catalogue is harvested over HTTP from the demo provider with an older oai_dc mapper (one
that dropped subjects and could not read some records), then remapped with today's: it must end
as a catalogue harvested with today's mapper does, with a history row per rewritten record and
nothing asked of the server.
"""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from harvest_pipeline.errors import WindowBusyError
from harvest_pipeline.formats import MappingError, register
from harvest_pipeline.formats.oai_dc import OAI_DC_NS, map_dc
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.harvest.remap import REMAP_MARKER, REMAP_STAGING, remap_source
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.remap import MAPPED_COLUMNS
from harvest_pipeline.store.staging import StagingWindow
from harvest_pipeline_tests.conftest import day_window, demo_source

_MAPPED = ", ".join(("identifier", "datestamp", "metadata_xml", "content_hash", *MAPPED_COLUMNS))


def _older_map_dc(element):
    record = map_dc(element)
    if record.title and record.title[0] in "AEIOU":
        raise MappingError("this mapper could not read titles starting with a vowel")
    record.subjects = []
    return record


@contextmanager
def _older_oai_dc_mapper():
    register(OAI_DC_NS, "dc", _older_map_dc, "oai_dc", replace=True)
    try:
        yield
    finally:
        register(OAI_DC_NS, "dc", map_dc, "oai_dc", replace=True)


def _records(db):
    with connect(db) as con:
        return con.execute(f"SELECT {_MAPPED} FROM records ORDER BY identifier").fetchall()


def _history_rows(db):
    with connect(db) as con:
        return con.execute("SELECT count(*) FROM record_history").fetchone()[0]


def test_a_remap_brings_stored_records_to_todays_mappers_and_a_second_one_writes_nothing(shared_demo, tmp_path):
    source = demo_source(shared_demo)
    windows = [day_window(3), day_window(4)]
    today_db, older_db = tmp_path / "today" / "harvest.duckdb", tmp_path / "older" / "harvest.duckdb"
    for window in windows:
        assert harvest_window(source, window, db_path=today_db).status == ledger.VERIFIED
    with _older_oai_dc_mapper():
        for window in windows:
            report = harvest_window(source, window, db_path=older_db)
            assert report.status == ledger.VERIFIED and report.counts.quarantined > 0  # the vowels
    with connect(older_db) as con:
        live, unmapped = con.execute(
            "SELECT count(*), count(mapping_error) FROM records WHERE NOT deleted").fetchone()
        differing = con.execute(
            "SELECT count(*) FROM records WHERE NOT deleted AND (mapping_error IS NOT NULL OR len(subjects) = 0)"
        ).fetchone()[0]
    assert _records(older_db) != _records(today_db) and 0 < unmapped < differing <= live
    history_before = _history_rows(older_db)
    # The remap asks the server nothing: its source points at a port where nothing listens.
    source = SourceConfig(id=source.id, url="http://127.0.0.1:9/oai")

    # A dry run says what would change and writes nothing.
    stored_before = _records(older_db)
    dry = remap_source(source, db_path=older_db, dry_run=True)
    assert (dry.examined, dry.changed, dry.now_mapped, dry.counts) == (live, differing, unmapped, None)
    assert dry.formats["(unmapped) -> oai_dc"] == unmapped and dry.columns["subjects"] == differing
    assert _records(older_db) == stored_before and _history_rows(older_db) == history_before

    report = remap_source(source, db_path=older_db, run_id="r1")
    assert (report.examined, report.changed, report.now_mapped, report.now_unmapped) == (live, differing, unmapped, 0)
    assert report.counts.restored == differing and report.counts.stale == 0
    # The same rows as a catalogue harvested with today's mapper: XML, hashes and datestamps kept.
    assert _records(older_db) == _records(today_db)
    with connect(older_db) as con:
        actions = con.execute("SELECT action, count(*) FROM record_history WHERE attempt_id = ? GROUP BY action",
                              [REMAP_MARKER + "r1"]).fetchall()
    assert actions == [("restored", differing)]

    # Nothing left to change: a second remap reads every record and writes nothing.
    again = remap_source(source, db_path=older_db)
    assert (again.examined, again.changed, again.counts) == (live, 0, None)
    assert _history_rows(older_db) == history_before + differing


def test_a_second_remap_of_a_source_at_the_same_time_fails_saying_so(shared_demo, tmp_path):
    source = demo_source(shared_demo)
    db = tmp_path / "harvest.duckdb"
    assert harvest_window(source, day_window(3), db_path=db).status == ledger.VERIFIED
    held = StagingWindow(tmp_path / "staging" / source.id / REMAP_STAGING)  # as a running remap holds it
    try:
        with pytest.raises(WindowBusyError, match="another remap of source demo is running"):
            remap_source(source, db_path=db)
    finally:
        held.release()
    # A remap after it takes the folder over (as it would after a killed one) and finds nothing to change.
    report = remap_source(source, db_path=db)
    assert report.examined > 0 and report.changed == 0
