"""CSW sources through the protocol-agnostic window pipeline, over HTTP against the demo's /csw."""

from __future__ import annotations

import math

import pytest

from harvest_pipeline.csw import ISO_SCHEMA, CSWClient, WindowConstraint
from harvest_pipeline.errors import ConfigError, IdDoesNotExist, ProtocolError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.harvest.csw_lister import CswLister
from harvest_pipeline.harvest.listers import lister_for
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.staging import open_staging_files
from harvest_pipeline_tests.conftest import today, day_window, demo_source, window_stats

pytestmark = pytest.mark.integration
ISO = {"type_names": "gmd:MD_Metadata", "output_schema": ISO_SCHEMA, "modified_queryable": "apiso:Modified"}


def csw_source(provider, *, id="geo", **csw) -> SourceConfig:
    return SourceConfig(id=id, protocol="csw", url=provider.base + "/csw", start=today().replace(day=1), csw=csw or None)


def rows(db_path, source_id: str, *cols: str) -> dict[str, tuple]:
    with connect(db_path) as con:
        got = con.execute(
            f"SELECT identifier, {', '.join(cols)} FROM records WHERE source_id = ? AND NOT deleted", [source_id]
        ).fetchall()
    return {r[0]: tuple(r[1:]) for r in got}


def test_window_lands_exactly_the_live_records_of_the_window(shared_demo, db_path):
    window = day_window(3)
    source = csw_source(shared_demo, page_size=20)
    assert isinstance(lister_for(source), CswLister)
    report = harvest_window(source, window, db_path=db_path)
    stats = window_stats(shared_demo, window)
    hits = CSWClient(source.url).hits(constraint=WindowConstraint(window.start, window.end))
    assert report.status == ledger.VERIFIED
    assert report.complete_list_size == stats["live"] == hits == report.counts.received == report.counts.created
    assert report.pages == math.ceil(hits / 20) > 1
    assert all(c.passed for c in report.checks.values())
    assert (report.from_param, report.until_param) == (
        window.start.strftime("%Y-%m-%dT%H:%M:%SZ"), window.end.strftime("%Y-%m-%dT%H:%M:%SZ"))
    assert report.warnings == [] and report.outside_window == 0
    with connect(db_path) as con:
        row = con.execute("SELECT status, received, complete_list_size, check_complete, cursor_closed "
                          "FROM harvest_windows WHERE source_id = 'geo'").fetchone()
        state = con.execute("SELECT granularity, earliest_datestamp, deleted_record FROM source_state "
                            "WHERE source_id = 'geo'").fetchone()
    assert row == ("verified", hits, hits, "passed", True)
    assert state == ("YYYY-MM-DDThh:mm:ssZ", shared_demo.stats()["earliest"], "no")
    assert open_staging_files(db_path) == []
    # The same window over OAI-PMH: exactly its live records, whatever the protocol.
    harvest_window(demo_source(shared_demo, id="oai"), window, db_path=db_path)
    csw, oai = rows(db_path, "geo", "title", "datestamp"), rows(db_path, "oai", "title", "datestamp")
    assert csw.keys() == oai.keys() and len(csw) == hits
    assert all(csw[i] == oai[i] for i in csw)  # same titles, same datestamps
    mapped = rows(db_path, "geo", "format_name", "url", "doi")
    assert {m[0] for m in mapped.values()} == {"csw_record"}
    assert all(m[1] and m[2] for m in mapped.values())


def test_rerun_of_a_window_is_a_no_op(shared_demo, db_path):
    window = day_window(4)
    source = csw_source(shared_demo, page_size=25)
    first = harvest_window(source, window, db_path=db_path)
    before = rows(db_path, "geo", "datestamp", "content_hash", "metadata_xml", "title")
    again = harvest_window(source, window, db_path=db_path)
    assert again.status == ledger.VERIFIED
    assert again.counts.upserted == 0 and again.counts.created == again.counts.updated == 0
    assert again.counts.unchanged == again.counts.received == first.counts.received > 0
    assert rows(db_path, "geo", "datestamp", "content_hash", "metadata_xml", "title") == before


def test_iso_output_schema_maps_title_and_bbox(shared_demo, db_path):
    window = day_window(2)
    dc = harvest_window(csw_source(shared_demo, id="geo_dc", page_size=30), window, db_path=db_path)
    iso = harvest_window(csw_source(shared_demo, id="geo_iso", page_size=30, **ISO), window, db_path=db_path)
    assert dc.status == iso.status == ledger.VERIFIED
    assert iso.counts.received == dc.counts.received == window_stats(shared_demo, window)["live"]
    cols = ("format_name", "title", "bbox_west", "bbox_south", "bbox_east", "bbox_north", "datestamp")
    a, b = rows(db_path, "geo_dc", *cols), rows(db_path, "geo_iso", *cols)
    assert a.keys() == b.keys()
    assert {v[0] for v in b.values()} == {"iso19139"} and {v[0] for v in a.values()} == {"csw_record"}
    assert all(v[1] for v in b.values())  # every ISO record has its title
    assert all(a[i][1:] == b[i][1:] for i in a)  # same title, bbox and modified date in both schemas
    boxed = [v for v in b.values() if v[2] is not None]
    assert 0 < len(boxed) < len(b)  # some records carry a bbox, some do not
    assert all(w < e and s < n for _, _, w, s, e, n, _ in boxed)


def test_capped_page_size_still_gets_every_record(tunable_demo, db_path):
    window = day_window(3)
    tunable_demo.set_options(csw_max_records_cap=25)
    report = harvest_window(csw_source(tunable_demo, page_size=100), window, db_path=db_path)
    live = window_stats(tunable_demo, window)["live"]
    assert live > 25
    assert report.status == ledger.VERIFIED
    assert report.counts.received == report.counts.stored == report.complete_list_size == live
    assert report.pages == math.ceil(live / 25)
    assert report.duplicates == 0
    assert sum("caps the page size" in w for w in report.warnings) == 1
    assert len(rows(db_path, "geo", "title")) == live


def test_stuck_next_record_stops_with_the_guard(tunable_demo, db_path):
    window = day_window(3)
    tunable_demo.set_options(csw_stuck_next_record=True)
    with pytest.raises(ProtocolError, match="guard 'csw-next-record'") as info:
        harvest_window(csw_source(tunable_demo, page_size=20), window, db_path=db_path)
    assert info.value.source_id == "geo" and info.value.window == window.key
    with connect(db_path) as con:
        status, error = con.execute("SELECT status, error FROM harvest_windows WHERE source_id = 'geo'").fetchone()
    assert status == "failed" and "guard 'csw-next-record'" in error


def test_touched_record_arrives_in_the_next_window(demo, db_path):
    source = csw_source(demo, page_size=20)
    old, new = day_window(4), day_window(1)
    harvest_window(source, old, db_path=db_path)
    ident, (old_stamp, old_title) = sorted(rows(db_path, "geo", "datestamp", "title").items())[0]
    touched_at = new.start.replace(hour=6)
    demo.touch(ident, at=touched_at)
    report = harvest_window(source, new, db_path=db_path)  # the old window is not listed again
    assert report.status == ledger.VERIFIED
    assert report.counts.updated == 1
    assert report.counts.created == report.counts.received - 1
    with connect(db_path) as con:
        stamp, title, w_start = con.execute(
            "SELECT datestamp, title, window_start FROM records WHERE source_id = 'geo' AND identifier = ?", [ident]
        ).fetchone()
        history = con.execute(
            "SELECT action FROM record_history WHERE identifier = ? ORDER BY received_at", [ident]).fetchall()
        windows = con.execute("SELECT count(*) FROM harvest_windows WHERE source_id = 'geo'").fetchone()[0]
    assert stamp.replace(tzinfo=None) == touched_at.replace(tzinfo=None) > old_stamp.replace(tzinfo=None)
    assert title != old_title and "revised" in title
    assert w_start.replace(tzinfo=None) == new.start.replace(tzinfo=None)
    assert history == [("created",), ("updated",)]
    assert windows == 2


def test_a_record_edited_mid_window_fails_completeness_then_a_rerun_verifies(demo, db_path):
    window = day_window(3)
    source = csw_source(demo, page_size=20)
    touched: list[str] = []

    class EditingLister(CswLister):
        """Edits the window's first record on the server right after the first page arrives
        (inside the page sequence, so it happens before page 2 is asked for, prefetch or not)."""

        def pages(self, **kw):
            for n, page in enumerate(super().pages(**kw), start=1):
                yield page
                if n == 1 and not touched:
                    first = next(CSWClient(source.url).get_records(
                        constraint=WindowConstraint(window.start, window.end), page_size=1))
                    touched.append(first.identifier)
                    demo.touch(first.identifier)  # now: after the window

    report = harvest_window(source, window, db_path=db_path, lister=EditingLister(source))
    assert touched
    assert report.status == ledger.INCOMPLETE and not report.checks["complete"].passed
    assert report.counts.received == report.complete_list_size - 1
    assert any("numberOfRecordsMatched changed" in w for w in report.warnings)
    again = harvest_window(source, window, db_path=db_path)
    assert again.status == ledger.VERIFIED
    assert again.complete_list_size == window_stats(demo, window)["live"] == report.complete_list_size - 1


def test_an_interrupted_window_resumes_from_its_start_position(shared_demo, db_path):
    window = day_window(5)
    source = csw_source(shared_demo, page_size=15)

    class Crash(Exception):
        pass

    class CrashingLister(CswLister):
        def pages(self, **kw):
            for n, page in enumerate(super().pages(**kw), start=1):
                if n == 3:
                    raise Crash("killed after two committed pages")
                yield page

    with pytest.raises(Crash):
        harvest_window(source, window, db_path=db_path, lister=CrashingLister(source))
    assert len(open_staging_files(db_path)) == 1
    seen: list[str] = []

    class RecordingLister(CswLister):
        def pages(self, *, resume_token, **kw):
            seen.append(resume_token)
            return super().pages(resume_token=resume_token, **kw)

    report = harvest_window(source, window, db_path=db_path, lister=RecordingLister(source))
    assert seen == ["31"]  # continued at startPosition 31, after the 30 records committed
    assert report.resumed and report.status == ledger.VERIFIED
    assert report.counts.received == report.complete_list_size == window_stats(shared_demo, window)["live"]


def test_extra_filter_narrows_the_source(shared_demo, db_path):
    window = day_window(3)
    like = ('<ogc:PropertyIsLike wildCard="%" singleChar="_" escapeChar="\\"><ogc:PropertyName>dc:subject'
            "</ogc:PropertyName><ogc:Literal>%optic%</ogc:Literal></ogc:PropertyIsLike>")
    report = harvest_window(csw_source(shared_demo, page_size=10, extra_filter=like), window, db_path=db_path)
    assert report.status == ledger.VERIFIED
    got = rows(db_path, "geo", "subjects")
    assert 0 < len(got) < window_stats(shared_demo, window)["live"]
    assert all(any("optic" in s.lower() for s in subjects) for (subjects,) in got.values())
    lister = CswLister(csw_source(shared_demo, extra_filter=like))
    listed = [r.identifier for page in lister.identifiers() for r in page.records]
    assert set(got) <= set(listed) and len(listed) == len(set(listed))


def test_identifiers_lists_every_live_record(shared_demo, db_path):
    lister = CswLister(csw_source(shared_demo, page_size=200))
    pages = list(lister.identifiers())
    listed = [r.identifier for page in pages for r in page.records]
    live = shared_demo.stats()["live"]
    assert len(listed) == len(set(listed)) == live == pages[0].resumption.complete_list_size
    assert len(pages) == math.ceil(live / 200) and pages[-1].next_token is None
    assert listed == sorted(listed)
    assert not any(r.deleted for page in pages for r in page.records)


def test_reconciliation_tombstones_what_the_catalogue_no_longer_holds(demo, db_path):
    from harvest_pipeline.harvest.reconcile import reconcile_source

    window = day_window(3)
    source = csw_source(demo, page_size=50)
    harvest_window(source, window, db_path=db_path)
    gone = sorted(rows(db_path, "geo", "title"))[0]
    demo.delete(gone, at=window.end.replace(hour=12))  # CSW: simply absent from now on
    report = reconcile_source(source, db_path=db_path)
    assert report.deleted == 1 and report.missing == 1
    assert report.verb == "GetRecords (brief)"
    assert report.listed == report.complete_list_size == demo.stats()["live"]
    with connect(db_path) as con:
        assert con.execute("SELECT deleted FROM records WHERE identifier = ?", [gone]).fetchone() == (True,)


def test_settings_the_catalogue_cannot_serve_fail_before_harvesting(shared_demo, db_path):
    window = day_window(3)
    with pytest.raises(ProtocolError, match="does not offer outputSchema http://www.opengis.net/cat/csw/3.0") as info:
        harvest_window(csw_source(shared_demo, output_schema="http://www.opengis.net/cat/csw/3.0"), window, db_path=db_path)
    assert "http://www.isotc211.org/2005/gmd" in str(info.value)
    with pytest.raises(ProtocolError, match="does not offer typeNames dif:DIF"):
        CswLister(csw_source(shared_demo, type_names="dif:DIF")).describe()
    lister = CswLister(csw_source(shared_demo, modified_queryable="foo:modified"))
    with pytest.raises(ConfigError, match="known prefix"):
        lister.pages(from_param="2026-11-01T00:00:00Z", until_param="2026-11-02T00:00:00Z", resume_token=None)
    with pytest.raises(ProtocolError, match="not a startPosition"):
        CswLister(csw_source(shared_demo)).pages(from_param=None, until_param=None, resume_token="abc")


def test_a_re_harvest_of_a_stored_csw_record_finds_it_unchanged(shared_demo, db_path):
    """A record fetched again with GetRecordById is the version the window stored: 'unchanged', its
    format label kept. The re-harvest labelled it with the OAI default prefix ('oai_dc'), so the
    merge saw a hand edit, rewrote the row as 'restored' and the next window flipped it back."""
    from harvest_pipeline.harvest.selected import harvest_selected

    window = day_window(3)
    source = csw_source(shared_demo, page_size=50)
    harvest_window(source, window, db_path=db_path)
    stored = rows(db_path, "geo", "metadata_prefix", "content_hash")
    picked = sorted(stored)[:2]
    report = harvest_selected(source, picked, db_path=db_path)
    assert report.actions == {i: "unchanged" for i in picked}
    assert report.verb == "GetRecordById"
    assert rows(db_path, "geo", "metadata_prefix", "content_hash") == stored
    assert {v[0] for v in stored.values()} == {"csw:http://www.opengis.net/cat/csw/2.0.2"}
    with connect(db_path) as con:
        actions = con.execute("SELECT DISTINCT action FROM record_history WHERE source_id = 'geo'").fetchall()
    assert sorted(a for (a,) in actions) == ["created", "unchanged"]
    assert harvest_window(source, window, db_path=db_path).counts.unchanged == len(stored)


def test_get_record_by_identifier_for_re_harvests(shared_demo):
    lister = CswLister(csw_source(shared_demo, **ISO))
    ident = next(r.identifier for page in lister.identifiers() for r in page.records)
    rec = lister.get_record(ident)
    assert rec.identifier == ident and rec.metadata_xml.startswith("<gmd:MD_Metadata")
    with pytest.raises(IdDoesNotExist, match="holds no record"):
        lister.get_record("oai:demo.harvest:1999-01-01/00000")


def test_what_a_getrecordbyid_answer_needed_reaches_the_listers_warnings():
    """A re-harvest's GetRecordById answer whose record has no identifier (or an unreadable date)
    says so in the lister's warnings, which reach the re-harvest's report; it was dropped, and the
    user saw only "holds no record"."""
    from harvest_pipeline_tests.csw.canned import NS, URL, dc_record, make_client

    def by_id(record: str) -> bytes:
        return (f'<?xml version="1.0" encoding="UTF-8"?><csw:GetRecordByIdResponse {NS}>{record}'
                "</csw:GetRecordByIdResponse>").encode()

    client, _ = make_client([by_id(dc_record("")), by_id(dc_record("b", modified="last tuesday"))])
    lister = CswLister(SourceConfig(id="canned", protocol="csw", url=URL), client=client)
    with pytest.raises(IdDoesNotExist, match="holds no record"):
        lister.get_record("a")
    assert lister.get_record("b").identifier == "b"
    assert lister.drain_warnings() == [
        "GetRecordById a: record at position 1 (Record) has no identifier; skipped",
        "GetRecordById b: record b: unreadable modification date 'last tuesday'",
    ]
    assert lister.drain_warnings() == []
