"""Reconciliation: deletion by absence, its mass-deletion guard, the ListRecords fallback, schedules."""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pytest

from harvest_pipeline.defs.factory import build_definitions
from harvest_pipeline.defs.reconcile import (
    GUARD_CHECK,
    RECONCILE_JOB,
    RECONCILE_OP,
    build_reconcile_schedule,
    confirm_run_config,
    reconcile_key,
    reconcile_schedule_name,
)
from harvest_pipeline.demo.process import start_demo_provider
from harvest_pipeline.errors import ConfigError, HTTPStatusError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.harvest.oai_lister import OaiLister
from harvest_pipeline.harvest.reconcile import guard, reconcile_source
from harvest_pipeline.oai.client import OAIClient
from harvest_pipeline.sources.registry import ReconcileSettings, SourceConfig
from harvest_pipeline.store import connect
from harvest_pipeline.store.reconcile import last_reconciliation
from harvest_pipeline_tests.conftest import demo_options, today, day_window, demo_source, learn_facts
from harvest_pipeline_tests.lifecycle.helpers import (
    history_actions,
    live_identifiers,
    record_row,
)

pytestmark = pytest.mark.integration


def harvest_days(source, db_path, days=range(1, 8)):
    for n in days:
        harvest_window(source, day_window(n), db_path=db_path)


def run_reconcile(source, *, confirm=False):
    """Materialize reconcile/<id> in a real Dagster run; return (result, check evaluation, metadata)."""
    defs = build_definitions([source])
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(RECONCILE_JOB).execute_in_process(
            instance=instance, raise_on_error=False, run_config=confirm_run_config() if confirm else None,
            asset_selection=[reconcile_key(source.id)],
        )
        [check] = result.get_asset_check_evaluations()
        record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(reconcile_key(source.id), GUARD_CHECK))
        assert record.status.value == ("SUCCEEDED" if check.passed else "FAILED")
    [mat] = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in mat.materialization.metadata.items()}
    return result, check, meta


# --- the guard, as a rule ------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, allowed, status",
    [
        (dict(listed=100, upstream_live=95, complete_list_size=100, local_live=100, missing=5), True, "applied"),
        (dict(listed=100, upstream_live=90, complete_list_size=100, local_live=100, missing=10), True, "applied"),
        (dict(listed=100, upstream_live=89, complete_list_size=100, local_live=100, missing=11), False, "blocked"),
        (dict(listed=0, upstream_live=0, complete_list_size=None, local_live=1, missing=1), False, "blocked"),
        (dict(listed=3, upstream_live=0, complete_list_size=3, local_live=3, missing=3), False, "blocked"),
        (dict(listed=0, upstream_live=0, complete_list_size=None, local_live=0, missing=0), True, "applied"),
        (dict(listed=90, upstream_live=90, complete_list_size=100, local_live=100, missing=1), False, "incomplete"),
    ],
)
def test_guard_rule(kw, allowed, status):
    verdict = guard(**kw, max_delete_fraction=0.10, confirmed=False)
    assert (verdict.allowed, verdict.status) == (allowed, status)


def test_guard_empty_listing_trips_even_when_any_fraction_is_allowed_and_confirm_overrides_all_but_incomplete():
    empty = dict(listed=0, upstream_live=0, complete_list_size=None, local_live=50, missing=50)
    assert not guard(**empty, max_delete_fraction=1.0, confirmed=False).allowed
    assert "empty list" in guard(**empty, max_delete_fraction=1.0, confirmed=False).reason
    assert guard(**empty, max_delete_fraction=0.1, confirmed=True).allowed
    short = dict(listed=10, upstream_live=10, complete_list_size=20, local_live=20, missing=10)
    assert guard(**short, max_delete_fraction=1.0, confirmed=True).status == "incomplete"


# --- through Dagster against the demo provider ---------------------------------------------
def test_empty_upstream_listing_deletes_nothing_and_fails_the_blocking_check(shared_demo, db_path):
    harvest_days(demo_source(shared_demo), db_path, days=range(1, 4))
    before = live_identifiers(db_path)
    assert before
    # The same source now answers with an empty list (noRecordsMatch), e.g. a broken index.
    future = (today() + timedelta(days=30)).date()
    with start_demo_provider(**demo_options(end_day=future)) as empty:
        lenient = demo_source(empty, reconcile=ReconcileSettings(max_delete_fraction=1.0))
        result, check, meta = run_reconcile(lenient)
        assert not result.success  # the blocking check fails the run
        assert not check.passed and "empty list" in check.description
        assert (meta["status"], meta["listed"], meta["deleted"]) == ("blocked", 0, 0)
        assert live_identifiers(db_path) == before  # nothing deleted

        # An operator who knows the source really is empty now confirms it.
        result, check, meta = run_reconcile(lenient, confirm=True)
        assert result.success and check.passed
        assert meta["deleted"] == len(before)
    assert live_identifiers(db_path) == set()


def test_large_deletion_is_blocked_until_confirmed(shared_demo, db_path):
    source = demo_source(shared_demo)
    harvest_days(source, db_path)
    before = live_identifiers(db_path)
    # The source now serves a smaller corpus: only its last 4 days (same identifiers there).
    with start_demo_provider(**demo_options(days=4)) as smaller:
        upstream = {h.identifier for h in OAIClient(smaller.url).list_identifiers("oai_dc") if not h.deleted}
        gone = before - upstream
        assert len(gone) > 0.1 * len(before) and before & upstream  # a large, partial deletion
        moved = demo_source(smaller)

        result, check, meta = run_reconcile(moved)
        assert not result.success and not check.passed
        assert "more than max_delete_fraction 10%" in check.description
        assert (meta["status"], meta["missing"], meta["deleted"]) == ("blocked", len(gone), 0)
        assert live_identifiers(db_path) == before
        # The check tells the operator how to confirm.
        asset = build_definitions([moved]).resolve_assets_def(reconcile_key("demo"))
        [spec] = asset.check_specs
        assert spec.blocking and "confirm_mass_deletion: true" in spec.description and RECONCILE_OP in spec.description
        assert asset.op.name == RECONCILE_OP and "reconcile/demo" in spec.description

        result, check, meta = run_reconcile(moved, confirm=True)
        assert result.success and check.passed and "confirmed" in check.description
        assert (meta["status"], meta["deleted"]) == ("applied", len(gone))
    assert live_identifiers(db_path) == before & upstream
    example = sorted(gone)[0]
    assert history_actions(db_path, example)[-1] == ("deleted", f"reconcile:{result.run_id}", result.run_id)
    with connect(db_path) as con:
        last = last_reconciliation(con, "demo")
    assert (last["status"], last["confirmed"], last["deleted"], last["verb"]) == ("applied", True, len(gone), "ListIdentifiers")


def test_a_listing_shorter_than_its_complete_list_size_never_deletes(demo, db_path):
    source = demo_source(demo)
    harvest_days(source, db_path, days=[2])
    victim = sorted(live_identifiers(db_path))[0]
    demo.delete(victim)
    demo.set_options(deleted_record="no", complete_list_size_bias=7)
    for confirm in (False, True):
        report = reconcile_source(source, db_path=db_path, confirm_mass_deletion=confirm)
        assert report.status == "incomplete" and report.deleted == 0 and report.missing == 1
    assert record_row(db_path, victim)["deleted"] is False


# --- ListIdentifiers -> ListRecords fallback -----------------------------------------------
BAD_VERB = (
    b'<?xml version="1.0" encoding="UTF-8"?><OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
    b"<responseDate>2026-01-01T00:00:00Z</responseDate><request>http://x/oai</request>"
    b'<error code="badVerb">ListIdentifiers is not implemented here</error></OAI-PMH>'
)


class NoListIdentifiers(OAIClient):
    """A real client to the demo, except that ListIdentifiers fails the way some servers do."""

    def __init__(self, url, failure):
        super().__init__(url)
        self.failure = failure
        self.verbs = []

    def _get(self, params):
        self.verbs.append(params.get("verb"))
        if params.get("verb") == "ListIdentifiers":
            url = self.url_for(params)
            if self.failure == "badVerb":
                return url, BAD_VERB, None
            raise HTTPStatusError(f"HTTP {self.failure}", status_code=self.failure, url=url)
        return super()._get(params)


@pytest.mark.parametrize("failure", ["badVerb", 503])
def test_listing_falls_back_to_list_records_when_list_identifiers_fails(shared_demo, failure):
    source = demo_source(shared_demo)
    plain = OaiLister(source)
    expected = [(r.identifier, r.deleted) for page in plain.identifiers() for r in page.records]
    assert plain.identifiers_verb == "ListIdentifiers"

    client = NoListIdentifiers(shared_demo.url, failure)
    lister = OaiLister(source, client=client)
    got = [(r.identifier, r.deleted) for page in lister.identifiers() for r in page.records]
    assert lister.identifiers_verb == "ListRecords"
    assert sorted(got) == sorted(expected) and len(got) == shared_demo.stats()["total"]
    assert client.verbs.count("ListIdentifiers") == 1 and "ListRecords" in client.verbs


def test_other_listing_errors_are_not_papered_over(shared_demo, db_path):
    source = demo_source(shared_demo)
    harvest_days(source, db_path, days=[3])
    before = live_identifiers(db_path)
    lister = OaiLister(source, client=NoListIdentifiers(shared_demo.url, 404))
    with pytest.raises(HTTPStatusError):
        reconcile_source(source, db_path=db_path, lister=lister)
    assert live_identifiers(db_path) == before


def test_reconciliation_through_the_fallback_deletes_what_is_gone(demo, db_path):
    source = demo_source(demo)
    harvest_days(source, db_path, days=[2, 3])
    victim = sorted(live_identifiers(db_path))[-1]
    demo.delete(victim)
    demo.set_options(deleted_record="transient")
    lister = OaiLister(source, client=NoListIdentifiers(demo.url, "badVerb"))
    report = reconcile_source(source, db_path=db_path, lister=lister)
    assert (report.status, report.verb, report.deleted) == ("applied", "ListRecords", 1)
    assert record_row(db_path, victim)["deleted"] is True


# --- schedules -----------------------------------------------------------------------------
def test_schedule_runs_by_default_only_where_deletions_can_vanish(tunable_demo, db_path):
    source = demo_source(tunable_demo, reconcile=ReconcileSettings(schedule="15 4 * * *"))
    learn_facts(source)  # definitions read what Identify said from the stored facts
    persistent = build_definitions([source]).resolve_schedule_def(reconcile_schedule_name("demo"))
    assert persistent.default_status == dg.DefaultScheduleStatus.STOPPED
    assert persistent.cron_schedule == "15 4 * * *" and persistent.execution_timezone == "UTC"
    assert "deletedRecord=persistent" in persistent.description

    tunable_demo.set_options(deleted_record="transient")
    learn_facts(source)
    transient = build_definitions([source]).resolve_schedule_def(reconcile_schedule_name("demo"))
    assert transient.default_status == dg.DefaultScheduleStatus.RUNNING
    assert transient.job_name == RECONCILE_JOB
    [request] = transient.evaluate_tick(dg.build_schedule_context()).run_requests
    assert request.asset_selection == [reconcile_key("demo")]  # the shared job, this source only

    weekly = build_definitions([demo_source(tunable_demo)]).resolve_schedule_def(reconcile_schedule_name("demo"))
    assert weekly.cron_schedule == "0 3 * * 0"

    csw = SourceConfig(id="cat", protocol="csw", url="http://127.0.0.1:9/csw")
    assert build_reconcile_schedule(csw, None, "-").default_status == dg.DefaultScheduleStatus.RUNNING
    with pytest.raises(ConfigError, match="reconcile.schedule"):
        bad = SourceConfig(id="x", url="http://127.0.0.1:9/oai", reconcile=ReconcileSettings(schedule="every sunday"))
        build_reconcile_schedule(bad, "no", "-")


def test_reconcile_asset_sits_downstream_of_the_window_asset(shared_demo, db_path):
    defs = build_definitions([demo_source(shared_demo)])
    graph = defs.resolve_asset_graph()
    assert dg.AssetKey(["harvest", "demo"]) in graph.get(reconcile_key("demo")).parent_keys
    assert not defs.resolve_assets_def(reconcile_key("demo")).partitions_def
