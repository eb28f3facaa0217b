"""Real Dagster materializations, asset checks and sensor ticks against the demo provider."""

from __future__ import annotations

import json

import dagster as dg
import pytest

from harvest_pipeline.demo import start_demo_provider
from harvest_pipeline.defs.batch import BATCH_JOB, SOURCES_TAG, batch_windows
from harvest_pipeline.defs.factory import build_definitions, window_job
from harvest_pipeline.defs.sensors import SENSOR_NAME
from harvest_pipeline.sources.registry import HttpSettings
from harvest_pipeline.store import connect, ledger
from harvest_pipeline_tests.conftest import today, day_window, demo_options, demo_source, learn_facts, window_stats

pytestmark = pytest.mark.integration
FAST_HTTP = HttpSettings(max_retries=1, backoff_base_seconds=0.01, backoff_max_seconds=0.02, retry_after_cap_seconds=1)
ASSET = dg.AssetKey(["harvest", "demo"])


def _checks(result) -> dict[str, tuple[bool, str]]:
    return {e.check_name: (e.passed, e.severity.value) for e in result.get_asset_check_evaluations()}


def test_definitions_load_with_one_partitioned_asset_checks_job_and_sensor(shared_demo, db_path):
    learn_facts(demo_source(shared_demo))
    defs = build_definitions([demo_source(shared_demo)])
    dg.Definitions.validate_loadable(defs)
    asset = defs.resolve_assets_def(ASSET)
    keys = asset.partitions_def.get_partition_keys()
    # Partitions start at Identify's earliestDatestamp and end with the last closed day.
    assert keys[-1] == day_window(1).key
    assert keys[0] == shared_demo.stats()["earliest"][:10]
    assert {c.name for c in asset.check_specs} == {"complete", "no_duplicates", "cursor_closed"}
    assert defs.resolve_sensor_def(SENSOR_NAME).default_status == dg.DefaultSensorStatus.RUNNING
    # The asset catalog shows the first line; the asset page the rest: where to look next.
    first, *rest = asset.descriptions_by_key[ASSET].splitlines()
    assert first.startswith("Harvests demo: OAI-PMH ListRecords of") and "one day window per partition" in first
    for where in ("**Partitions**", "**Checks**", "Plots", "harvest_watermarks", "harvest-pipeline status"):
        assert where in "\n".join(rest)


def test_materializing_one_window_records_metadata_and_passing_checks(shared_demo, db_path):
    learn_facts(demo_source(shared_demo))
    defs = build_definitions([demo_source(shared_demo)])
    window = day_window(3)
    with dg.instance_for_test() as instance:
        result = window_job(defs, "demo").execute_in_process(partition_key=window.key, instance=instance)
        assert result.success
        [mat] = result.get_asset_materialization_events()
        meta = {k: v.value for k, v in mat.materialization.metadata.items()}
        expected = window_stats(shared_demo, window)
        # Per-run counts are text (never plotted): read them back as numbers.
        assert meta["records"] == int(meta["completeListSize"]) == expected["total"]
        assert int(meta["deletions"]) == expected["deleted"]
        assert int(meta["upserts"]) == expected["live"]
        assert meta["pages"] > 1 and meta["seconds"] > 0
        assert _checks(result) == {
            "complete": (True, "ERROR"), "no_duplicates": (True, "ERROR"), "cursor_closed": (True, "ERROR"),
        }
        # The UI shows the window's checks per partition.
        record = instance.get_latest_asset_check_evaluation_record(dg.AssetCheckKey(ASSET, "complete"))
        assert record.partition == window.key
        assert record.status.value == "SUCCEEDED"


@pytest.fixture
def demo_with_deletions():
    """Deletions are plotted once the source has shown a tombstone (defs/report.py), and a demo day
    of 60 records often has none: a provider with enough records a day that its closed days do."""
    with start_demo_provider(**demo_options(records_per_day=400)) as provider:
        yield provider


def test_plotted_metadata_describes_the_window_and_survives_a_rerun(demo_with_deletions, db_path):
    provider = demo_with_deletions
    learn_facts(demo_source(provider))
    defs = build_definitions([demo_source(provider)])
    window = next((w for w in map(day_window, range(1, 8)) if window_stats(provider, w)["deleted"]), None)
    assert window is not None, "the demo provider deleted no record in the 7 closed days before today"
    expected = window_stats(provider, window)
    events = []
    with dg.instance_for_test() as instance:
        for _ in range(2):
            result = window_job(defs, "demo").execute_in_process(partition_key=window.key, instance=instance)
            assert result.success
            [mat] = result.get_asset_materialization_events()
            events.append(mat.materialization.metadata)
    # The UI plots the int and float entries of each partition's latest materialization.
    plotted = [
        {k: v.value for k, v in meta.items() if isinstance(v, (dg.IntMetadataValue, dg.FloatMetadataValue))}
        for meta in events
    ]
    assert set(plotted[0]) == {"records", "live", "deleted", "pages", "seconds"}
    assert (plotted[0]["live"], plotted[0]["deleted"]) == (expected["live"], expected["deleted"])
    first, again = ({k: v for k, v in p.items() if k != "seconds"} for p in plotted)
    assert again == first  # a re-harvest draws the same points
    assert [int(m["created"].value) for m in events] == [expected["live"], 0]

    preview = events[0]["changed_records"].value
    assert [c.name for c in preview.schema.columns] == ["identifier", "datestamp", "action", "title"]
    rows = [r.data for r in preview.records]
    assert 0 < len(rows) <= 20 and events[0]["changed_records_shown"].value.endswith(f"of {expected['total']}, newest datestamps first")
    assert {r["action"] for r in rows} <= {"created", "deleted"}
    assert all(r["title"] for r in rows if r["action"] == "created")
    assert all(r["datestamp"].startswith(window.key) and r["datestamp"].endswith("Z") for r in rows)
    assert events[1]["changed_records"].value.startswith("none")


def test_a_window_harvested_as_sub_windows_previews_the_records_they_changed(demo, db_path):
    # Tokens that expire after one page: the day cannot be listed whole and splits into sub-windows,
    # whose merges have attempts of their own (the partition's report sums them).
    demo.set_options(token_expires_after_pages=1)
    source = demo_source(demo, http=FAST_HTTP)
    learn_facts(source)
    defs = build_definitions([source])
    window = day_window(3)
    expected = window_stats(demo, window)
    with dg.instance_for_test() as instance:
        result = window_job(defs, "demo").execute_in_process(partition_key=window.key, instance=instance)
    assert result.success
    [mat] = result.get_asset_materialization_events()
    meta = mat.materialization.metadata
    assert "split into" in meta["what_the_server_did"].value
    rows = [r.data for r in meta["changed_records"].value.records]
    assert meta["changed_records_shown"].value == f"{len(rows)} of {expected['total']}, newest datestamps first"
    assert 0 < len(rows) <= 20 and all(r["datestamp"].startswith(window.key) for r in rows)
    assert all(r["title"] for r in rows if r["action"] == "created")


def test_lying_complete_list_size_fails_the_check_in_dagster(demo, db_path):
    demo.set_options(complete_list_size_bias=3)
    learn_facts(demo_source(demo))
    defs = build_definitions([demo_source(demo)])
    with dg.instance_for_test() as instance:
        result = window_job(defs, "demo").execute_in_process(
            partition_key=day_window(2).key, instance=instance
        )
    assert _checks(result)["complete"] == (False, "ERROR")


def test_sensor_launches_closed_windows_and_advances_the_watermark_only_over_passing_ones(demo, db_path):
    learn_facts(demo_source(demo))
    defs = build_definitions([demo_source(demo)])
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    job = window_job(defs, "demo")
    with dg.instance_for_test() as instance:
        first = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        requested = requested_keys(defs, first.run_requests)
        all_keys = defs.resolve_assets_def(ASSET).partitions_def.get_partition_keys()
        assert requested == all_keys and len(requested) >= 7
        assert all(r.tags[SOURCES_TAG] == "demo" and r.job_name == BATCH_JOB for r in first.run_requests)

        bad = requested[3]
        for key in requested:
            demo.set_options(complete_list_size_bias=5 if key == bad else 0)
            job.execute_in_process(partition_key=key, instance=instance, raise_on_error=False)

        second = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        with connect(db_path) as con:
            watermark = ledger.get_watermark(con, "demo")
            bad_row = ledger.get_window(con, "demo", ledger_start(defs, bad))
        assert bad_row.status == ledger.INCOMPLETE
        assert watermark == ledger_start(defs, bad)  # stopped right before the failing window
        assert json.loads(second.cursor)["watermarks"]["demo"].startswith(bad)
        assert not second.run_requests  # the failed window waits for its retry backoff

        demo.set_options(complete_list_size_bias=0)
        job.execute_in_process(partition_key=bad, instance=instance)
        sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        with connect(db_path) as con:
            assert ledger.get_watermark(con, "demo") == today().replace(tzinfo=None)


def requested_keys(defs, run_requests) -> list[str]:
    """The windows of demo a tick's batch run requests cover, in order."""
    return [k for r in run_requests for k in batch_windows(r.run_config).get("demo", [])]


def ledger_start(defs, key):
    tw = defs.resolve_assets_def(ASSET).partitions_def.time_window_for_partition_key(key)
    return tw.start.replace(tzinfo=None)


def _context_with_a_busy_catalogue(logger: str):
    """A step context as report_metadata sees it, whose catalogue another process holds."""
    import logging
    from contextlib import contextmanager
    from types import SimpleNamespace

    from harvest_pipeline.errors import StoreLockedError

    class Busy:
        @contextmanager
        def get_connection(self):
            raise StoreLockedError("catalogue is locked by another process", hint="wait")
            yield

    return SimpleNamespace(resources=SimpleNamespace(duckdb=Busy()), log=logging.getLogger(logger))


def test_a_busy_catalogue_after_the_merge_does_not_cost_the_window_its_metadata(shared_demo, db_path):
    """The window is merged and verified before its metadata reads the catalogue again: a lock
    there must not fail the window (the ledger would say verified, Dagster would show it missing)."""
    from harvest_pipeline.defs.report import report_metadata
    from harvest_pipeline.harvest import harvest_window

    window = day_window(3)
    report = harvest_window(demo_source(shared_demo), window, db_path=db_path)
    assert report.status == ledger.VERIFIED

    context = _context_with_a_busy_catalogue("test")
    meta = report_metadata(context, report)
    assert meta["status"] == ledger.VERIFIED and meta["records"] == window_stats(shared_demo, window)["total"]
    assert "busy" in meta["changed_records"].value and "live" not in meta


def test_windows_metadata_failing_part_way_logs_no_warning_the_fallback_logs_again(shared_demo, db_path, caplog):
    """The events thread builds a group's metadata at once and, if that fails, each window's
    alone: the group's attempt must not have logged the first windows' warnings already."""
    import dataclasses
    import logging

    from harvest_pipeline.defs.report import report_metadata, reports_metadata
    from harvest_pipeline.harvest import harvest_window

    report = harvest_window(demo_source(shared_demo), day_window(4), db_path=db_path)
    first = dataclasses.replace(report, warnings=["the server sent a duplicate page"])
    broken = dataclasses.replace(report, warnings=["another warning"], counts=None)  # its metadata raises

    context = _context_with_a_busy_catalogue("test.report")
    with caplog.at_level(logging.WARNING, logger="test.report"):
        with pytest.raises(AttributeError):
            reports_metadata(context, [first, broken])
        assert not [r for r in caplog.records if "duplicate page" in r.getMessage()]
        report_metadata(context, first)  # the fallback, window by window
    assert len([r for r in caplog.records if "duplicate page" in r.getMessage()]) == 1
