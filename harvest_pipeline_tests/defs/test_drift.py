"""The drift audit: the server's own count of its records against the catalogue's, in Dagster."""

from __future__ import annotations

import dagster as dg
import pytest

from harvest_pipeline.defs.drift import CHECK, DRIFT_JOB, DRIFT_SCHEDULE, drift_key
from harvest_pipeline.defs.factory import build_definitions
from harvest_pipeline.harvest.drift import audit_drift
from harvest_pipeline.harvest.full import harvest_full
from harvest_pipeline.store import connect, ledger
from harvest_pipeline_tests.conftest import today, demo_source

pytestmark = pytest.mark.integration


def _check(result) -> tuple[bool, str, str, dict]:
    [e] = result.get_asset_check_evaluations()
    assert e.check_name == CHECK
    return e.passed, e.severity.value, e.description, {k: v.value for k, v in e.metadata.items()}


def test_matching_counts_pass_and_deletions_without_tombstones_fail_with_advice(demo, db_path):
    source = demo_source(demo)
    assert harvest_full(source, db_path=db_path).status == ledger.VERIFIED
    defs = build_definitions([source])
    job = defs.resolve_job_def(DRIFT_JOB)
    assert defs.resolve_schedule_def(DRIFT_SCHEDULE).default_status == dg.DefaultScheduleStatus.RUNNING
    with dg.instance_for_test() as instance:
        passed, severity, text, meta = _check(job.execute_in_process(instance=instance))
        stats = demo.stats()
        assert passed, text
        # A persistent server counts its deletions: so does the comparison.
        assert meta["server_count"] == meta["catalogue_count"] == stats["total"]
        assert meta["compared"] == "live and deleted"

        # The server starts forgetting deletions and deletes a record without a tombstone.
        with connect(db_path) as con:
            [gone] = con.execute("SELECT identifier FROM records WHERE NOT deleted ORDER BY identifier LIMIT 1").fetchone()
        demo.set_options(deleted_record="no")
        demo.delete(gone)
        result = job.execute_in_process(instance=instance, raise_on_error=False)
        passed, severity, text, meta = _check(result)
        assert not passed and severity == "ERROR"
        assert meta["server_count"] == demo.stats()["live"] and meta["catalogue_count"] == meta["server_count"] + 1
        assert "1 record(s) more than the server counts" in text and "reconcile/demo" in text
        assert "materialize reconcile/demo (job reconcile)" in meta["advice"]
        record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(drift_key("demo"), CHECK))
        assert record.status.value == "FAILED"

        # Doing what it says puts the catalogue back in step.
        assert defs.resolve_job_def("reconcile").execute_in_process(instance=instance).success
        passed, _, text, _ = _check(job.execute_in_process(instance=instance))
        assert passed, text
        history = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(drift_key("demo"), CHECK), limit=10)
        assert [h.status.value for h in history] == ["SUCCEEDED", "FAILED", "SUCCEEDED"]


def test_records_missing_from_before_the_watermark_ask_for_a_full_harvest(shared_demo, db_path):
    source = demo_source(shared_demo)
    harvest_full(source, db_path=db_path)
    with connect(db_path) as con:
        ledger.set_watermark(con, "demo", today())  # everything before the demo's clock is harvested
        assert audit_drift(source, db_path=db_path).passed
        con.execute("DELETE FROM records WHERE identifier IN (SELECT identifier FROM records WHERE NOT deleted LIMIT 2)")
    audit = audit_drift(source, db_path=db_path)
    assert audit.passed is False and audit.recent.size == 0
    assert "at least 2 record(s) fewer" in audit.advice() and "harvest-pipeline harvest demo --full" in audit.advice()
