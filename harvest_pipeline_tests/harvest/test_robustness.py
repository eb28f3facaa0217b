"""Faults of real endpoints, reproduced by the demo provider's fault modes, against one window.

Each test switches on one fault and checks what the harvester did: finished with the exact
records and said what it saw, or stopped with an error that names the guard, URL and remedy.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from harvest_pipeline.demo import start_demo_provider
from harvest_pipeline.errors import DeferredError, ProtocolError, XMLSecurityError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.sources.registry import HttpSettings
from harvest_pipeline.store import connect, ledger
from harvest_pipeline_tests.conftest import day_window, demo_options, demo_source

pytestmark = pytest.mark.integration
FAST_RETRIES = HttpSettings(max_retries=4, backoff_base_seconds=0.01, backoff_max_seconds=0.05, retry_after_cap_seconds=2)


@pytest.fixture
def demo(tunable_demo):
    """The tests here change only the provider's options (its fault modes), which are put back
    after each: one shared provider serves them. A test that touches records uses `own_demo`."""
    return tunable_demo


@pytest.fixture
def own_demo():
    with start_demo_provider(**demo_options()) as provider:
        yield provider


def content(db_path, *, columns="identifier, deleted, content_hash, title") -> list[tuple]:
    with connect(db_path) as con:
        return con.execute(f"SELECT {columns} FROM records ORDER BY identifier").fetchall()


@pytest.fixture(scope="module")
def clean(shared_demo, tmp_path_factory):
    """The window harvested from a well-behaved server: what every faulty run must end with."""
    db = tmp_path_factory.mktemp("clean") / "h.duckdb"
    harvest_window(demo_source(shared_demo), day_window(3, shared_demo.today), db_path=db)
    return content(db)


def harvest(demo, db_path, **source_kw):
    return harvest_window(demo_source(demo, http=FAST_RETRIES, **source_kw), day_window(3), db_path=db_path)


def ledger_row(db_path):
    with connect(db_path) as con:
        return ledger.get_window(con, "demo", day_window(3).start)


def test_control_characters_are_removed_counted_and_reported(demo, db_path, clean):
    demo.set_options(control_chars=3)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED
    assert report.repaired > 0
    assert any("illegal in XML 1.0" in w for w in report.warnings)
    assert content(db_path) == clean  # removing them restores exactly what the author wrote


def test_bytes_invalid_in_the_encoding_become_replacement_characters(demo, db_path, clean):
    demo.set_options(bad_bytes=5)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED and report.repaired > 0
    with connect(db_path) as con:
        marked = con.execute("SELECT count(*) FROM records WHERE title LIKE '%\ufffd%'").fetchone()[0]
        repaired = con.execute("SELECT repaired_chars FROM harvest_windows").fetchone()[0]
    assert marked > 0 and repaired == report.repaired
    assert [r[0] for r in content(db_path)] == [r[0] for r in clean]  # nothing lost


def test_a_broken_record_is_quarantined_then_recovered_alone(demo, db_path, clean):
    demo.set_options(broken_record_every=1)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED
    assert any("fetched again alone with GetRecord" in w for w in report.warnings)
    with connect(db_path) as con:
        rows = con.execute("SELECT kind, identifier, error, octet_length(raw) FROM quarantine").fetchall()
    assert rows and all(kind == "recovered" and ident and "well-formed" in err and size > 0 for kind, ident, err, size in rows)
    assert content(db_path) == clean


def test_a_record_fetched_again_alone_reports_what_its_getrecord_response_needed(demo, db_path):
    # The GetRecord response of a record recovered alone is repaired too (control characters in
    # every record): the window's warnings say so for that record, not only for the list pages.
    demo.set_options(broken_record_every=1, control_chars=1)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED
    recovered = [w.split()[1].rstrip(":") for w in report.warnings if w.endswith("fetched again alone with GetRecord")]
    repaired = [w.split()[1].rstrip(":") for w in report.warnings
                if w.startswith("GetRecord ") and "removed 2 character(s) illegal in XML 1.0" in w]
    assert recovered and repaired == recovered


def test_a_page_cut_in_the_middle_is_fetched_again(demo, db_path, clean):
    demo.set_options(malformed_page_every=2)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED
    assert any("fetched it again" in w for w in report.warnings)
    assert content(db_path) == clean


@pytest.mark.parametrize("attack", ["laughs", "xxe", "external_dtd"])
def test_hostile_xml_fails_the_window_with_a_clear_error(demo, db_path, attack):
    demo.set_options(entity_attack=attack)
    with pytest.raises(XMLSecurityError) as err:
        harvest(demo, db_path)
    text = str(err.value)
    assert "DTD" in text and "source=demo" in text and demo.url in text
    assert ledger_row(db_path).status == ledger.FAILED
    assert content(db_path) == []


@pytest.mark.parametrize(
    "fault, guard",
    [
        ({"repeat_token": 1}, "repeated-token"),
        ({"restart_list_at": 2}, "list-restarted"),  # restarts before the end
        ({"restart_list": True, "no_complete_list_size": True}, "list-restarted"),  # cannot prove the end
    ],
)
def test_looping_servers_stop_at_a_named_guard(demo, db_path, fault, guard):
    demo.set_options(**fault)
    with pytest.raises(ProtocolError) as err:
        harvest(demo, db_path)
    assert f"guard '{guard}'" in str(err.value)
    row = ledger_row(db_path)
    assert row.status == ledger.FAILED and guard in row.error


@pytest.mark.parametrize("full", [False, True])
def test_a_final_token_that_restarts_the_list_ends_it_after_the_whole_list(demo, db_path, clean, full):
    # pycsw 2.x in OAI-PMH mode: the last page's token starts the list again from its first record
    demo.set_options(restart_list=True)
    report = harvest_window(demo_source(demo, http=FAST_RETRIES), day_window(3), db_path=db_path, full=full)
    assert report.status == ledger.VERIFIED and report.cursor_closed and report.duplicates == 0
    assert report.counts.received == report.complete_list_size
    assert any("started the list again" in w and "dropped" in w for w in report.warnings)
    if not full:
        assert content(db_path) == clean
    with connect(db_path) as con:
        assert "final-token-restarts-list" in ledger.get_quirks(con, "demo")
    # the quirk is remembered: without completeListSize the same ending is then accepted (unproven)
    demo.set_options(restart_list=True, no_complete_list_size=True)
    report = harvest(demo, db_path)
    assert report.status == ledger.UNPROVEN and report.duplicates == 0
    assert any("as it did before" in w for w in report.warnings)


def test_no_complete_list_size_is_unproven_not_silently_passed(demo, db_path, clean):
    demo.set_options(no_complete_list_size=True)
    report = harvest(demo, db_path)
    assert report.status == ledger.UNPROVEN
    assert report.checks["complete"].severity == "warn" and not report.checks["complete"].passed
    assert content(db_path) == clean


@pytest.mark.parametrize(
    "fault, said",
    [
        ({"wrong_cursor": True}, "cursor"),
        ({"no_final_token_element": True}, None),
        ({"extra_empty_page": True}, None),
        ({"date_only_datestamps": True}, "day granularity"),
        ({"out_of_window_records": 2}, "outside the requested window"),
    ],
)
def test_non_conforming_servers_are_harvested_and_reported(demo, db_path, clean, fault, said):
    demo.set_options(**fault)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED, report.checks
    if said:
        assert any(said in w for w in report.warnings), report.warnings
    got = content(db_path, columns="identifier, deleted, content_hash, title")
    assert set(clean) <= set(got)  # out-of-window records are extra, never instead
    if "out_of_window_records" not in fault:
        assert got == clean


def test_token_only_continuation_rejected_is_worked_around_and_remembered(demo, db_path, clean):
    demo.set_options(reject_token_only=True)
    first = harvest(demo, db_path)
    assert first.status == ledger.VERIFIED
    assert any("continuation-needs-arguments" in w for w in first.warnings)
    with connect(db_path) as con:
        assert "continuation-needs-arguments" in ledger.get_quirks(con, "demo")
    again = harvest(demo, db_path)  # the next run starts with the original arguments: no rejection
    assert not any("rejected a token-only continuation" in w for w in again.warnings)
    assert content(db_path) == clean


def test_server_rejecting_dates_falls_back_to_a_full_listing(demo, db_path, clean):
    demo.set_options(reject_dates=True)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED
    assert any("rejects from/until" in w for w in report.warnings)
    with connect(db_path) as con:
        assert "dates-rejected" in ledger.get_quirks(con, "demo")
    assert set(clean) <= set(content(db_path))


def test_server_ignoring_dates_is_noticed(demo, db_path, clean):
    demo.set_options(ignore_dates=True)
    report = harvest(demo, db_path)
    assert report.outside_window > 0
    assert any("outside the requested window" in w for w in report.warnings)
    assert set(clean) <= set(content(db_path))


def test_overlap_catches_records_a_lagging_index_showed_late(own_demo, db_path):
    """A record the server indexed late (datestamp before the window's start) is caught by the
    next window when the source re-asks a little before each window."""
    later = day_window(2)  # `harvest` below covers day_window(3)
    harvest(own_demo, db_path, overlap_seconds=3600)
    with connect(db_path) as con:
        ident = con.execute("SELECT identifier FROM records WHERE NOT deleted ORDER BY identifier LIMIT 1").fetchone()[0]
    late = later.start - timedelta(minutes=30)  # inside the window harvested before
    own_demo.touch(ident, at=late)  # appears now, dated inside the already-harvested window
    report = harvest_window(demo_source(own_demo, http=FAST_RETRIES, overlap_seconds=3600), later, db_path=db_path)
    assert report.from_param < later.start.strftime("%Y-%m-%dT%H:%M:%SZ")
    with connect(db_path) as con:
        assert con.execute("SELECT window_start FROM records WHERE identifier = ?", [ident]).fetchone()[0] == later.start.replace(tzinfo=None)


def test_transient_http_failures_are_retried(demo, db_path, clean):
    demo.set_options(fail_every=3, fail_status=503, truncate_every=5, empty_body_every=7)
    report = harvest(demo, db_path)
    assert report.status == ledger.VERIFIED
    assert any("retried" in w and "HTTP 503" in w for w in report.warnings), report.warnings
    assert content(db_path) == clean


def test_retry_after_beyond_the_cap_defers_the_window(demo, db_path):
    demo.set_options(fail_every=1, fail_status=503, retry_after="3600")
    with pytest.raises(DeferredError):
        harvest(demo, db_path)
    row = ledger_row(db_path)
    assert row.status == ledger.DEFERRED and row.retry_not_before is not None


def test_every_recoverable_fault_at_once_ends_with_the_clean_table(shared_demo, tmp_path):
    """The issue's bar: with every survivable fault switched on together, a harvest of every
    window ends with the same records as a clean harvest: nothing lost, nothing duplicated."""
    from harvest_pipeline.demo.process import start_demo_provider
    from harvest_pipeline_tests.conftest import demo_options

    windows = [day_window(n) for n in range(demo_options()["days"], 0, -1)]
    columns = "identifier, deleted, content_hash, title, metadata_xml"  # datestamps differ by design (day-only)
    clean_db, faulty_db = tmp_path / "clean.duckdb", tmp_path / "faulty.duckdb"
    for window in windows:
        harvest_window(demo_source(shared_demo), window, db_path=clean_db)
    with start_demo_provider(faults="all-recoverable", **demo_options()) as faulty:
        reports = [harvest_window(demo_source(faulty, http=FAST_RETRIES), w, db_path=faulty_db) for w in windows]
    assert all(r.status in (ledger.VERIFIED, ledger.UNPROVEN) for r in reports), [(r.window.key, r.status) for r in reports]
    expected = content(clean_db, columns=columns)
    assert content(faulty_db, columns=columns) == expected
    with connect(faulty_db) as con:
        assert con.execute("SELECT count(*) - count(DISTINCT identifier) FROM records").fetchone()[0] == 0
    said = " ".join(w for r in reports for w in r.warnings)
    for sign in ("illegal in XML 1.0", "GetRecord", "day granularity", "outside the requested window", "continuation-needs-arguments"):
        assert sign in said, sign


def test_credentials_never_reach_the_ledger_or_the_error(demo, db_path, monkeypatch):
    monkeypatch.setenv("DEMO_KEY", "sekrit-header-value")
    demo.set_options(fail_every=1, fail_status=500)
    source = demo_source(demo, http=HttpSettings(max_retries=0), headers_from_env={"X-Api-Key": "DEMO_KEY"})
    source = source.model_copy(update={"url": demo.url + "?api_key=sekrit-query-value"})
    with pytest.raises(Exception) as err:
        harvest_window(source, day_window(3), db_path=db_path)
    row = ledger_row(db_path)
    for text in (str(err.value), row.error):
        assert "sekrit" not in text
        assert "127.0.0.1" in text  # the URL is still named, redacted
