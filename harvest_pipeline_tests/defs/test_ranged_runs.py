"""Ranged runs: many windows per Dagster run, each window still recorded on its own.

Real materializations against the demo provider, read back from the Dagster instance.
"""

from __future__ import annotations

import json

import dagster as dg
import pytest

from harvest_pipeline.defs.checks import CHECK_DESCRIPTIONS
from harvest_pipeline.defs.batch import BATCH_JOB, SOURCES_TAG, batch_run_config, batch_windows
from harvest_pipeline.defs.factory import build_definitions, window_job
from harvest_pipeline.defs.sensors import SENSOR_NAME, range_tags
from harvest_pipeline.store import connect, ledger
from harvest_pipeline.store.staging import staging_path
from harvest_pipeline_tests.conftest import today, day_window, demo_source, learn_facts, window_stats

pytestmark = pytest.mark.integration
ASSET = dg.AssetKey(["harvest", "demo"])


def per_partition_checks(instance) -> dict[str, dict[str, str]]:
    """{check: {partition: latest status}} as Dagster stores it (the run's summary has no partition)."""
    out = {}
    for name in CHECK_DESCRIPTIONS:
        infos = instance.event_log_storage.get_asset_check_partition_info([dg.AssetCheckKey(ASSET, name)])
        out[name] = {i.partition_key: i.latest_execution_status.value for i in infos if i.partition_key is not None}
    return out


def materialized(instance) -> dict[str, dict]:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=ASSET), limit=100).records
    return {r.partition_key: {k: v.value for k, v in r.asset_materialization.metadata.items()} for r in records}


# Dagster's default event log, and the project's (dagster.yaml), which gives each window's check
# results their materialization's storage id without reading it back.
EVENT_LOGS = {
    "dagster_default": {},
    "project": {"event_log_storage": {"module": "harvest_pipeline.defs.event_log",
                                      "class": "PooledSqliteEventLogStorage"}},
}


@pytest.mark.parametrize("event_log", sorted(EVENT_LOGS))
def test_ranged_run_records_each_window_and_a_failing_window_does_not_stop_the_others(demo, db_path, event_log,
                                                                                       tmp_path, monkeypatch):
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))  # the project's storage keeps its files under it
    source = demo_source(demo, windows_per_run=5)
    learn_facts(source)
    defs = build_definitions([source])
    assert defs.resolve_assets_def(ASSET).backfill_policy == dg.BackfillPolicy.multi_run(5)
    windows = [day_window(n) for n in (6, 5, 4, 3, 2)]
    broken = windows[2]
    # A file where the window's staging folder belongs: that window's harvest raises (a folder
    # whose cursor is merely unreadable would be started over).
    path = staging_path(db_path, "demo", broken.start)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")

    job = window_job(defs, "demo")
    with dg.instance_for_test(overrides=EVENT_LOGS[event_log]) as instance:
        result = job.execute_in_process(
            instance=instance, raise_on_error=False, tags=range_tags(windows[0].key, windows[-1].key),
        )
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data
        assert f"1 of 5 windows failed ({broken.key}:" in failure.error.message
        assert list(failure.user_failure_data.metadata["failed_windows"].value) == [broken.key]

        # Every other window has its own materialization, with its own numbers, and its own checks.
        mats = materialized(instance)
        assert set(mats) == {w.key for w in windows} - {broken.key}
        for w in windows:
            if w is broken:
                continue
            expected = window_stats(demo, w)
            assert mats[w.key]["records"] == int(mats[w.key]["completeListSize"]) == expected["total"]
            assert mats[w.key]["status"] == "verified"
        checks = per_partition_checks(instance)
        for name in CHECK_DESCRIPTIONS:
            # The failed window's checks stay planned in a failed run (the UI shows them as not
            # executed); every other window has its own passing result.
            assert checks[name] == {w.key: ("PLANNED" if w is broken else "SUCCEEDED") for w in windows}, name
        # Each result targets its window's materialization, which is what the check's Partitions
        # tab in the UI counts (an unlinked result shows there as missing).
        infos = instance.event_log_storage.get_asset_check_partition_info([dg.AssetCheckKey(ASSET, "complete")])
        linked = {i.partition_key for i in infos
                  if i.partition_key and i.latest_target_materialization_storage_id is not None and i.is_current}
        assert linked == {w.key for w in windows} - {broken.key}
        with connect(db_path) as con:
            statuses = {w.key: ledger.get_window(con, "demo", w.start.replace(tzinfo=None)).status for w in windows}
            watermark = ledger.get_watermark(con, "demo")
        assert statuses == {w.key: (ledger.FAILED if w is broken else ledger.VERIFIED) for w in windows}
        assert watermark is None  # the first windows (day 7, 8) were never harvested

        # The failed window alone, retried: a single-partition run as before ranged runs.
        path.unlink()
        retry = job.execute_in_process(instance=instance, partition_key=broken.key)
        assert retry.success
        [mat] = retry.get_asset_materialization_events()
        assert mat.materialization.partition == broken.key
        assert per_partition_checks(instance)["complete"][broken.key] == "SUCCEEDED"
        assert set(materialized(instance)) == {w.key for w in windows}


def test_sensor_requests_catch_up_as_batch_runs_and_each_window_is_recorded_on_its_own(demo, db_path):
    source = demo_source(demo, windows_per_run=3)
    learn_facts(source)
    defs = build_definitions([source])
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    keys = defs.resolve_assets_def(ASSET).partitions_def.get_partition_keys()
    chunks = [keys[i:i + 3] for i in range(0, len(keys), 3)]
    assert len(chunks) >= 3  # so that the sensor has to hold some back
    batch = defs.resolve_job_def(BATCH_JOB)
    with dg.instance_for_test() as instance:
        launched = []
        for _tick in range(len(chunks)):
            tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
            if not tick.run_requests:
                break
            # At most two chunks of a source in flight: the second run waits for the source's lock.
            assert len(tick.run_requests) <= 2
            assert {r.job_name for r in tick.run_requests} == {BATCH_JOB}
            assert all(r.tags[SOURCES_TAG] == "demo" for r in tick.run_requests)
            for r in tick.run_requests:  # what the daemon does with each request, one after another
                launched.append(batch_windows(r.run_config)["demo"])
                assert batch.execute_in_process(instance=instance, run_config=r.run_config, tags=r.tags).success
        assert launched == chunks
        after = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        assert not after.run_requests
        assert json.loads(after.cursor)["watermarks"]["demo"].startswith(today().strftime("%Y-%m-%d"))
        # Every window of the batch runs is its own materialization of harvest/demo, with its own checks.
        assert set(materialized(instance)) == set(keys)
        checks = per_partition_checks(instance)
        for name in CHECK_DESCRIPTIONS:
            assert checks[name] == {k: "SUCCEEDED" for k in keys}, name
        with connect(db_path) as con:  # the runs stored the watermark; the sensor only reads
            assert ledger.get_watermark(con, "demo") == today().replace(tzinfo=None)


def test_a_batch_run_harvests_several_sources_and_a_failing_window_fails_alone(demo, db_path):
    sources = [demo_source(demo, id=sid) for sid in ("alpha", "beta")]
    for source in sources:
        learn_facts(source)
    defs = build_definitions(sources)
    windows = [day_window(n) for n in (4, 3, 2)]
    broken = windows[1]
    path = staging_path(db_path, "beta", broken.start)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # beta's second window raises
    plan = {"alpha": [w.key for w in windows], "beta": [w.key for w in windows]}
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(BATCH_JOB).execute_in_process(
            instance=instance, run_config=batch_run_config(plan), raise_on_error=False,
        )
        assert not result.success
        failure = next(e for e in result.all_events if e.is_step_failure).step_failure_data
        assert f"1 of 6 windows failed (beta {broken.key}:" in failure.error.message
        for sid in ("alpha", "beta"):
            key = dg.AssetKey(["harvest", sid])
            records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=10).records
            expected = {w.key for w in windows} - ({broken.key} if sid == "beta" else set())
            assert {r.partition_key for r in records} == expected, sid
            infos = instance.event_log_storage.get_asset_check_partition_info([dg.AssetCheckKey(key, "complete")])
            assert {i.partition_key: i.latest_execution_status.value for i in infos if i.partition_key} == {
                k: "SUCCEEDED" for k in expected}, sid
        with connect(db_path) as con:
            assert ledger.get_window(con, "beta", broken.start.replace(tzinfo=None)).status == ledger.FAILED
            assert ledger.get_window(con, "alpha", broken.start.replace(tzinfo=None)).status == ledger.VERIFIED



def test_a_batch_run_advances_its_sources_watermarks_together_at_its_end(demo, db_path, monkeypatch):
    """A hundred sources of a batch run end together: their watermarks are advanced in one
    transaction at the run's end (one each, at once, kept the catalogue busy about 1 s after the
    last response), and each still moves over its own verified windows only."""
    import harvest_pipeline.defs.assets as assets

    sources = [demo_source(demo, id=sid) for sid in ("alpha", "beta")]
    for source in sources:
        learn_facts(source)
    defs = build_definitions(sources)
    keys = {sid: defs.resolve_assets_def(dg.AssetKey(["harvest", sid])).partitions_def.get_partition_keys()
            for sid in ("alpha", "beta")}
    broken = day_window(3)
    path = staging_path(db_path, "beta", broken.start)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")  # beta's window of three days ago fails: its watermark stops before it
    calls = []
    advance = assets.advance_stored_many
    monkeypatch.setattr(assets, "advance_stored_many", lambda con, windows: calls.append(sorted(windows)) or advance(con, windows))
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(BATCH_JOB).execute_in_process(
            instance=instance, run_config=batch_run_config(keys), raise_on_error=False,
        )
    assert not result.success  # beta's broken window
    assert calls == [["alpha", "beta"]]
    with connect(db_path) as con:
        assert ledger.get_watermark(con, "alpha") == today().replace(tzinfo=None)
        assert ledger.get_watermark(con, "beta") == broken.start.replace(tzinfo=None)


def test_sensor_does_not_request_windows_already_in_flight(demo, db_path):
    source = demo_source(demo, windows_per_run=30)
    learn_facts(source)
    defs = build_definitions([source])
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    keys = defs.resolve_assets_def(ASSET).partitions_def.get_partition_keys()
    with dg.instance_for_test() as instance:
        # A queued UI launch of the first three windows, as the daemon would hold it.
        queued = instance.create_run_for_job(window_job(defs, "demo"), tags=range_tags(keys[0], keys[2]),
                                             asset_selection=frozenset({ASSET}))
        assert instance.get_run_by_id(queued.run_id).status == dg.DagsterRunStatus.NOT_STARTED
        tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        [request] = tick.run_requests  # one chunk in flight already: room for one more
        assert batch_windows(request.run_config) == {"demo": keys[3:]}


def test_a_source_without_tombstones_is_asked_once_per_run_whether_it_has_any(demo, db_path, monkeypatch):
    """The plot of `deleted` is left out for a source without any tombstone; whether it has one is
    a scan of the source's whole `deleted` column, asked once per run (the run holds the source's
    lock: only its own merges, which count what they delete, could add one meanwhile)."""
    from harvest_pipeline.store import preview

    asked = []
    real = preview.source_has_deletions
    monkeypatch.setattr(preview, "source_has_deletions", lambda con, sid: asked.append(sid) or real(con, sid))
    demo.set_options(deleted_record="no")  # deleted records vanish from the lists: no tombstone
    source = demo_source(demo, windows_per_run=3)
    learn_facts(source)
    job = window_job(build_definitions([source]), "demo")
    windows = [day_window(n) for n in (4, 3, 2)]
    with dg.instance_for_test() as instance:
        for _ in range(2):
            result = job.execute_in_process(instance=instance, tags=range_tags(windows[0].key, windows[-1].key))
            assert result.success
        mats = materialized(instance)
    assert asked == ["demo", "demo"]  # once in each of the two runs, not after each of their 3 windows
    assert set(mats) == {w.key for w in windows}
    assert all("deleted" not in m and m["live"] > 0 for m in mats.values())


def test_a_batch_run_reads_its_free_sources_windows_at_once_and_a_busy_source_waits_and_reads_its_own(
        demo, db_path, monkeypatch):
    """A batch run takes the locks of its sources that no other run holds and reads what their
    windows start from in one go (a hundred sources each reading their own queued on the
    catalogue before their first requests); a source whose lock another process holds waits for
    it, then reads its own, after that holder is gone. Every window is harvested either way."""
    import harvest_pipeline.harvest.sequence as sequence
    from harvest_pipeline.harvest.source_lock import SourceLock
    from harvest_pipeline_tests.harvest.test_source_lock import hold_in_child

    sources = [demo_source(demo, id=sid) for sid in ("alpha", "beta", "gamma")]
    for source in sources:
        learn_facts(source)
    defs = build_definitions(sources)
    windows = [day_window(n) for n in (3, 2)]
    reads: list[list[str]] = []
    real_read = sequence.read_starting_states
    monkeypatch.setattr(sequence, "read_starting_states",
                        lambda con, by_source: reads.append(sorted(by_source)) or real_read(con, by_source))
    holder = hold_in_child(db_path, "beta")  # another run harvesting beta
    real_acquire = SourceLock.acquire

    def acquire(self, *, on_wait=None, timeout=None):
        # The other run ends once beta's thread has begun to wait for it (not on a timer: a slow
        # machine reached the thread's wait only after the holder was gone).
        if on_wait is not None and self.source_id == "beta":
            def waited():
                on_wait()
                holder.kill()
            return real_acquire(self, on_wait=waited, timeout=timeout)
        return real_acquire(self, on_wait=on_wait, timeout=timeout)

    monkeypatch.setattr(SourceLock, "acquire", acquire)
    try:
        with dg.instance_for_test() as instance:
            result = defs.resolve_job_def(BATCH_JOB).execute_in_process(
                instance=instance, run_config=batch_run_config({s.id: [w.key for w in windows] for s in sources}),
                raise_on_error=False,
            )
            messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
            for source in sources:
                records = instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=dg.AssetKey(["harvest", source.id])), limit=10).records
                assert {r.partition_key for r in records} == {w.key for w in windows}, source.id
    finally:
        holder.kill()
        holder.wait()
    assert result.success
    assert reads == [["alpha", "gamma"], ["beta"]]  # the free ones together, then beta alone
    assert any("beta: another run is harvesting this source; waiting" in m for m in messages)
    with connect(db_path) as con:
        for source in sources:
            for w in windows:
                assert ledger.get_window(con, source.id, w.start.replace(tzinfo=None)).status == ledger.VERIFIED


def test_a_batch_runs_console_keeps_info_lines_and_its_events_are_stored_all_the_same(demo, db_path, capfd):
    """The sensor's batch runs log their console at INFO: the four DEBUG events per window are not
    formatted into the run's stderr again, and are stored in the instance as before."""
    source = demo_source(demo, id="alpha")
    learn_facts(source)
    defs = build_definitions([source])
    windows = [day_window(n) for n in (3, 2)]
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(BATCH_JOB).execute_in_process(
            instance=instance, run_config=batch_run_config({"alpha": [w.key for w in windows]}))
        assert result.success
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["harvest", "alpha"])), limit=10).records
        assert {r.partition_key for r in records} == {w.key for w in windows}
        infos = instance.event_log_storage.get_asset_check_partition_info(
            [dg.AssetCheckKey(dg.AssetKey(["harvest", "alpha"]), "complete")])
        assert {i.partition_key for i in infos if i.partition_key} == {w.key for w in windows}
    err = capfd.readouterr().err
    assert "harvesting 2 window(s) of 1 source(s) at once" in err  # INFO lines still there
    assert "ASSET_MATERIALIZATION" not in err and "ASSET_CHECK_EVALUATION" not in err


def test_windows_waiting_for_the_events_thread_are_recorded_together_each_with_its_own_counts(demo, db_path, monkeypatch):
    """The windows that wait for a batch run's events thread are taken together: their catalogue
    counts are read in one statement, and each materialization still carries its own window's."""
    import time

    import harvest_pipeline.store.preview as preview
    from harvest_pipeline.defs.assets import EventRecorder

    sources = [demo_source(demo, id=sid) for sid in ("alpha", "beta", "gamma")]
    for source in sources:
        learn_facts(source)
    defs = build_definitions(sources)
    windows = [day_window(n) for n in (3, 2)]
    read_together: list[int] = []
    real_counts, real_log = preview.windows_record_counts, EventRecorder._log
    monkeypatch.setattr(preview, "windows_record_counts",
                        lambda con, ws: read_together.append(len(ws)) or real_counts(con, ws))
    slow_once = []

    def log(self, *args):
        if not slow_once:  # the first window keeps the events thread busy until the others wait
            slow_once.append(1)
            deadline = time.monotonic() + 60
            while len(self.pending) < len(sources) * len(windows) and time.monotonic() < deadline:  # all recorded
                time.sleep(0.05)
        return real_log(self, *args)

    monkeypatch.setattr(EventRecorder, "_log", log)
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(BATCH_JOB).execute_in_process(
            instance=instance, run_config=batch_run_config({s.id: [w.key for w in windows] for s in sources}))
        assert result.success
        live = {}
        for source in sources:
            for r in instance.fetch_materializations(
                    dg.AssetRecordsFilter(asset_key=dg.AssetKey(["harvest", source.id])), limit=10).records:
                live[(source.id, r.partition_key)] = r.asset_materialization.metadata["live"].value
    assert sum(read_together) == len(sources) * len(windows) and max(read_together) >= 2, read_together
    with connect(db_path) as con:
        for source in sources:
            for w in windows:
                (stored,) = con.execute(
                    "SELECT count(*) FROM records WHERE source_id = ? AND NOT deleted AND datestamp >= ? AND datestamp < ?",
                    [source.id, w.start.replace(tzinfo=None), w.end.replace(tzinfo=None)]).fetchone()
                assert live[(source.id, w.key)] == stored > 0, (source.id, w.key)


_BATCH_IN_CHILD = """
import json, resource, sys
soft, hard, url, ids, keys = json.loads(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
import dagster as dg
from harvest_pipeline.defs.batch import BATCH_JOB, batch_run_config
from harvest_pipeline.defs.factory import build_definitions
from harvest_pipeline.sources import SourceConfig

defs = build_definitions([SourceConfig(id=sid, url=url) for sid in ids])
with dg.instance_for_test() as instance:
    result = defs.resolve_job_def(BATCH_JOB).execute_in_process(
        instance=instance, run_config=batch_run_config({sid: keys for sid in ids}), raise_on_error=False)
    messages = [entry.user_message for entry in instance.all_logs(result.run_id)]
print(json.dumps({"success": result.success, "messages": messages}))
"""


def test_a_batch_run_allowed_few_open_files_harvests_its_sources_a_few_at_a_time(demo, db_path):
    """Each source holds a few files open while it is harvested. A process whose hard limit is too
    low for all of a run's sources at once (macOS's default soft limit is 256, many Linux systems'
    1,024) harvests as many at a time as it may, says so, and verifies every window. Uncapped, these
    24 sources ran out of descriptors at a limit of 80 (and succeeded at 90: they share one host,
    whose politeness has them wait one after another)."""
    import subprocess
    import sys

    pytest.importorskip("resource")
    ids = [f"s{n:02d}" for n in range(24)]
    for sid in ids:
        learn_facts(demo_source(demo, id=sid))
    windows = [day_window(2)]
    done = subprocess.run(
        [sys.executable, "-c", _BATCH_IN_CHILD, json.dumps([80, 80, demo.url, ids, [w.key for w in windows]])],
        capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["success"], [m for m in out["messages"] if "failed" in m or "Errno" in m][:5]
    assert any("window(s) of 24 source(s) 2 at a time" in m for m in out["messages"])
    assert any("may open 80 files, enough for 2 of the 24 sources at a time" in m and "ulimit -n 208" in m
               for m in out["messages"])
    with connect(db_path) as con:
        for sid in ids:
            assert ledger.get_window(con, sid, windows[0].start.replace(tzinfo=None)).status == ledger.VERIFIED, sid
