"""Re-harvest of selected records (job and CLI) and full harvests (CLI and job), over HTTP."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pytest

from harvest_pipeline.defs.factory import build_definitions
from harvest_pipeline.defs.jobs import FULL_JOB, RECORDS_JOB, RECORDS_OP, full_run_config, records_run_config
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.harvest.full import FULL_START
from harvest_pipeline.store import connect, ledger
from harvest_pipeline_tests.conftest import today, day_window, demo_source
from harvest_pipeline_tests.lifecycle.helpers import (
    cli_env,
    history_actions,
    live_identifiers,
    record_row,
    run_cli,
)

pytestmark = pytest.mark.integration
UNKNOWN = "oai:demo.harvest:1999-01-01/00001"


def test_records_job_fetches_each_identifier_and_reports_unknown_ones(demo, db_path):
    source = demo_source(demo)
    harvest_window(source, day_window(2), db_path=db_path)
    a, b = sorted(live_identifiers(db_path))[:2]
    demo.touch(a, at=today() - timedelta(hours=1))
    defs = build_definitions([source])
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(RECORDS_JOB).execute_in_process(
            instance=instance, run_config=records_run_config("demo", [a, b, UNKNOWN, a]),
        )
    assert result.success
    out = result.output_for_node(RECORDS_OP)
    assert out["actions"] == {a: "updated", b: "unchanged"}
    assert (out["requested"], out["fetched"], out["not_found"]) == (3, 2, [UNKNOWN])
    assert record_row(db_path, a)["datestamp"] == (today() - timedelta(hours=1)).replace(tzinfo=None)
    assert record_row(db_path, UNKNOWN) is None
    marker = f"selected:{result.run_id}"
    assert history_actions(db_path, a)[-1] == ("updated", marker, result.run_id)
    assert history_actions(db_path, b)[-1] == ("unchanged", marker, result.run_id)
    [step] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    meta = {k: v.value for k, v in step.step_output_data.metadata.items()}
    assert (meta["updated"], meta["unchanged"], meta["not_found"]) == (1, 1, 1)


def test_a_reharvest_reports_what_its_getrecord_responses_needed(demo, db_path):
    # A GetRecord response with characters XML 1.0 forbids is repaired; the re-harvest's report,
    # the job's output and its metadata say so, naming the record (they said nothing before).
    source = demo_source(demo)
    harvest_window(source, day_window(2), db_path=db_path)
    a, b = sorted(live_identifiers(db_path))[:2]
    demo.set_options(control_chars=1)  # every record's title carries two such characters
    with dg.instance_for_test() as instance:
        result = build_definitions([source]).resolve_job_def(RECORDS_JOB).execute_in_process(
            instance=instance, run_config=records_run_config("demo", [a, b]),
        )
    assert result.success
    out = result.output_for_node(RECORDS_OP)
    assert out["actions"] == {a: "unchanged", b: "unchanged"}  # the repair restores the record as stored
    repaired = [w for w in out["warnings"] if "removed 2 character(s) illegal in XML 1.0" in w]
    assert sorted(w.split(": repaired the response")[0] for w in repaired) == [f"GetRecord {a}", f"GetRecord {b}"]
    [step] = [e for e in result.all_events if e.event_type_value == "STEP_OUTPUT"]
    assert all(w in step.step_output_data.metadata["warnings"].value for w in repaired)


def test_a_reharvest_merged_again_after_running_out_of_memory_says_so(tmp_path, db_path, sources_file, monkeypatch, capsys):
    # The re-harvest merges through the window's run_write: a merge whose writes run out of memory
    # at the lower limit (store/merge_memory.py; forced here with 4 MB) is merged again, and the
    # CLI, the job's output and its metadata (what the UI shows) say so. The CLI runs in this
    # process (its job runs in-process), so the forced limit applies to it.
    from harvest_pipeline.cli import main
    from harvest_pipeline.cli.common import cli_instance
    from harvest_pipeline.demo.process import start_demo_provider
    from harvest_pipeline.store import merge as merge_module, merge_memory
    from harvest_pipeline_tests.conftest import demo_options

    monkeypatch.delenv("HARVEST_DUCKDB_MEMORY_LIMIT", raising=False)
    with start_demo_provider(**demo_options(records_per_day=2_000, page_size=500, days=2)) as provider:
        source = demo_source(provider)
        harvest_window(source, day_window(1), db_path=db_path)
        identifiers = sorted(live_identifiers(db_path))
        sources_file(demo=provider)
        for name, value in cli_env(tmp_path, db_path).items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(merge_memory, "_lowering_off", False)
        monkeypatch.setattr(merge_memory, "write_limit", lambda limit: "4MB")
        monkeypatch.setattr(merge_module, "LARGE_WINDOW_ROWS", 100)
        code = main(["harvest", "demo", *(arg for i in identifiers for arg in ("--identifier", i))])
    printed = capsys.readouterr().out
    assert code == 0 and len(identifiers) > 100, printed
    assert f"re-harvested {len(identifiers)} of {len(identifiers)} record(s)" in printed
    [why] = [line.strip()[len("warning: merged twice: "):] for line in printed.splitlines()
             if line.strip().startswith("warning: merged twice: ")]
    assert "ran out of memory at the lower limit" in why
    [run] = cli_instance().get_runs()
    [output] = [e for e in cli_instance().all_logs(run.run_id) if e.dagster_event and e.dagster_event.event_type_value == "STEP_OUTPUT"]
    assert why in output.dagster_event.step_output_data.metadata["warnings"].value  # the UI's view of the run
    with connect(db_path) as con:
        by_reharvest = con.execute("SELECT count(*) FROM record_history WHERE attempt_id LIKE 'selected:%'").fetchone()[0]
    assert by_reharvest == len(identifiers)  # one version each: the rolled-back attempt left nothing


def test_a_record_the_server_no_longer_knows_is_left_untouched(demo, db_path):
    source = demo_source(demo)
    harvest_window(source, day_window(3), db_path=db_path)
    victim = sorted(live_identifiers(db_path))[0]
    before = history_actions(db_path, victim)
    demo.delete(victim)
    demo.set_options(deleted_record="no")  # GetRecord now answers idDoesNotExist
    defs = build_definitions([source])
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(RECORDS_JOB).execute_in_process(
            instance=instance, run_config=records_run_config("demo", [victim]),
        )
    assert result.success
    assert result.output_for_node(RECORDS_OP)["not_found"] == [victim]
    assert record_row(db_path, victim)["deleted"] is False
    assert history_actions(db_path, victim) == before


@pytest.fixture
def env(tmp_path, db_path, demo, sources_file):
    sources_file(demo=demo)
    return cli_env(tmp_path, db_path)


def test_cli_reharvests_selected_records(env, tmp_path, demo, db_path):
    source = demo_source(demo)
    harvest_window(source, day_window(2), db_path=db_path)
    a, b = sorted(live_identifiers(db_path))[:2]
    demo.delete(b, at=today() - timedelta(minutes=5))  # persistent: GetRecord returns the tombstone

    done = run_cli("harvest", "demo", "--identifier", a, "--identifier", b, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "re-harvested 2 of 2 record(s)" in done.stdout
    assert f"{a}  unchanged" in done.stdout and f"{b}  deleted" in done.stdout
    assert record_row(db_path, b)["deleted"] is True

    partly = run_cli("harvest", "demo", "--identifier", a, "--identifier", UNKNOWN, env=env, cwd=tmp_path)
    assert partly.returncode == 1, partly.stdout + partly.stderr
    assert f"{UNKNOWN}  NOT FOUND upstream (idDoesNotExist): the local record is left untouched" in partly.stdout
    # The run went to the persistent Dagster home, so the UI shows it.
    assert any((tmp_path / "dagster_home").rglob("*.db"))

    clash = run_cli("harvest", "demo", "--full", "--identifier", a, env=env, cwd=tmp_path)
    assert clash.returncode == 2
    clash = run_cli("harvest", "demo", "--full", "--from", "2026-01-01", env=env, cwd=tmp_path)
    assert clash.returncode == 2


def test_cli_full_harvest_lands_the_whole_source_and_is_idempotent(env, tmp_path, demo, db_path):
    done = run_cli("harvest", "demo", "--full", env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    expected = demo.stats()
    assert f"{expected['total']} records of completeListSize {expected['total']}" in done.stdout
    assert f"{expected['live']} upserts, {expected['deleted']} deletions" in done.stdout and "verified" in done.stdout
    with connect(db_path) as con:
        live, deleted = con.execute(
            "SELECT count(*) FILTER (WHERE NOT deleted), count(*) FILTER (WHERE deleted) FROM records"
        ).fetchone()
        row = ledger.get_window(con, "demo", FULL_START)
    assert (live, deleted) == (expected["live"], expected["deleted"])
    assert row.partition_key.startswith("full-") and row.status == ledger.VERIFIED
    assert row.received == expected["total"]

    again = run_cli("harvest", "demo", "--full", env=env, cwd=tmp_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"0 upserts, 0 deletions, {expected['total']} unchanged" in again.stdout
    with connect(db_path) as con:
        assert ledger.get_window(con, "demo", FULL_START).attempts == 2


def test_full_job_fails_when_its_checks_fail(tunable_demo, db_path):
    tunable_demo.set_options(complete_list_size_bias=2)
    defs = build_definitions([demo_source(tunable_demo)])
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(FULL_JOB).execute_in_process(
            instance=instance, raise_on_error=False, run_config=full_run_config("demo"))
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure)
    assert "complete" in failure.step_failure_data.user_failure_data.description
    with connect(db_path) as con:
        assert ledger.get_window(con, "demo", FULL_START).status == ledger.INCOMPLETE
