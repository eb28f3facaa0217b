"""The project's dagster.yaml event log: Dagster's SQLite files, pooled connections, synchronous=NORMAL."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg
import pytest

from harvest_pipeline.defs import event_log
from harvest_pipeline.defs.event_log import PooledSqliteEventLogStorage

ROOT = Path(__file__).resolve().parents[2]
PARTITIONS = dg.StaticPartitionsDefinition(["a", "b", "c"])


@dg.asset(partitions_def=PARTITIONS, check_specs=[dg.AssetCheckSpec("complete", asset="window")])
def window(context):
    yield dg.MaterializeResult(metadata={"records": 3})
    yield dg.AssetCheckResult(check_name="complete", passed=True)


@pytest.fixture
def project_home(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    return home


def _open_files_under(folder: Path) -> int:
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(folder))
        except OSError:
            pass
    return count


def test_the_project_instance_writes_and_reads_events_with_pooled_connections(project_home):
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        assert isinstance(storage, PooledSqliteEventLogStorage)
        for key in PARTITIONS.get_partition_keys():
            assert dg.materialize([window], instance=instance, partition_key=key).success
        # The connection Dagster writes with commits without an fsync per transaction.
        with storage.index_connection() as conn:
            assert conn.exec_driver_sql("PRAGMA synchronous").scalar() == 1  # NORMAL
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    # Dagster's own files, where its default storage keeps them: another instance reads them back.
    assert (project_home / "history" / "runs" / "index.db").exists()
    with dg.DagsterInstance.from_config(str(project_home)) as again:
        mats = again.fetch_materializations(dg.AssetKey("window"), limit=10).records
        assert sorted(m.partition_key for m in mats) == ["a", "b", "c"]
        checks = again.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(dg.AssetKey("window"), "complete"), limit=10)
        assert len(checks) == 3


def test_history_written_by_dagsters_default_storage_stays_readable(tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")  # Dagster's default storage
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.get() as before:
        assert type(before.event_log_storage).__name__ == "SqliteEventLogStorage"
        assert dg.materialize([window], instance=before, partition_key="a").success
    shutil.copyfile(ROOT / "dagster.yaml", home / "dagster.yaml")  # an existing home upgraded
    with dg.DagsterInstance.get() as after:
        assert isinstance(after.event_log_storage, PooledSqliteEventLogStorage)
        assert [m.partition_key for m in after.fetch_materializations(dg.AssetKey("window"), limit=5).records] == ["a"]
        assert dg.materialize([window], instance=after, partition_key="b").success
        keys = {m.partition_key for m in after.fetch_materializations(dg.AssetKey("window"), limit=5).records}
        assert keys == {"a", "b"}


def test_open_files_stay_bounded_however_many_runs_are_read(project_home, monkeypatch):
    monkeypatch.setattr(event_log, "OPEN_SHARDS", 3)
    runs_dir = project_home / "history" / "runs"
    with dg.DagsterInstance.get() as instance:
        run_ids = []
        for _ in range(8):
            result = dg.materialize([window], instance=instance, partition_key="a")
            run_ids.append(result.run_id)
        for run_id in run_ids:  # as the UI does, opening each run's page
            assert instance.all_logs(run_id)
        storage = instance.event_log_storage
        assert len(storage._engines) <= 3
        # Each kept engine holds at most its pool's connections (and their WAL/shm files).
        assert _open_files_under(runs_dir) <= 3 * (event_log.POOL_SIZE + 8) * 3
        instance.delete_run(run_ids[-1])
        assert run_ids[-1] not in storage._engines
    assert _open_files_under(runs_dir) == 0  # dispose closes every pooled connection


def test_the_check_table_is_looked_up_once_not_before_every_check_result(project_home, monkeypatch):
    from dagster._core.storage.event_log.sqlite.sqlite_event_log import SqliteEventLogStorage

    lookups: list[str] = []
    dagsters_lookup = SqliteEventLogStorage.has_table

    def counted(self, table_name):
        lookups.append(table_name)
        return dagsters_lookup(self, table_name)

    monkeypatch.setattr(SqliteEventLogStorage, "has_table", counted)
    with dg.DagsterInstance.get() as instance:
        for key in PARTITIONS.get_partition_keys():
            assert dg.materialize([window], instance=instance, partition_key=key).success
        checks = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(dg.AssetKey("window"), "complete"), limit=10)
        assert [c.status.value for c in checks] == ["SUCCEEDED"] * 3
        # Three runs stored a planned check and its result each: one lookup per table found.
        assert lookups.count("asset_check_executions") == 1 and len(lookups) == len(set(lookups))
        instance.wipe()  # the tables are dropped and made again: asked again
        instance.event_log_storage.has_table("asset_check_executions")
        assert lookups.count("asset_check_executions") >= 2


def test_the_asset_key_tables_columns_are_inspected_once_not_before_every_materialization(project_home, monkeypatch):
    from dagster._core.storage.event_log.sql_event_log import SqlEventLogStorage

    inspected: list[str] = []
    dagsters_inspection = SqlEventLogStorage._has_asset_key_col_on_connection

    def counted(self, conn, column_name):
        inspected.append(column_name)
        return dagsters_inspection(self, conn, column_name)

    monkeypatch.setattr(SqlEventLogStorage, "_has_asset_key_col_on_connection", counted)
    with dg.DagsterInstance.get() as instance:
        for key in PARTITIONS.get_partition_keys():
            assert dg.materialize([window], instance=instance, partition_key=key).success
        assert len(instance.fetch_materializations(dg.AssetKey("window"), limit=10).records) == 3
        # Three materializations stored: the column was inspected once.
        assert inspected.count("last_materialization_timestamp") == 1
        instance.wipe()  # the tables are dropped and made again: inspected again
        assert dg.materialize([window], instance=instance, partition_key="a").success
        assert inspected.count("last_materialization_timestamp") == 2


def test_a_stored_materializations_id_is_given_once_as_the_storage_reads_it_back(project_home):
    with dg.DagsterInstance.get() as instance:
        storage = instance.event_log_storage
        for key in PARTITIONS.get_partition_keys():
            assert dg.materialize([window], instance=instance, partition_key=key).success
        for key in PARTITIONS.get_partition_keys():
            stored = storage.take_stored_materialization(dg.AssetKey("window"), key)
            read = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey("window"), asset_partitions=[key]), limit=1).records[0]
            assert stored is not None
            assert (stored.storage_id, stored.run_id, stored.timestamp) == (read.storage_id, read.run_id, read.timestamp)
            # Once: asked again, the caller reads the storage (another run may have stored a newer one).
            assert storage.take_stored_materialization(dg.AssetKey("window"), key) is None
        assert storage.take_stored_materialization(dg.AssetKey("other"), "a") is None


def test_remembered_materializations_stay_bounded(project_home, monkeypatch):
    monkeypatch.setattr(event_log, "REMEMBERED_MATERIALIZATIONS", 2)
    with dg.DagsterInstance.get() as instance:
        for key in PARTITIONS.get_partition_keys():
            assert dg.materialize([window], instance=instance, partition_key=key).success
        storage = instance.event_log_storage
        kept = [k for k in PARTITIONS.get_partition_keys()
                if storage.take_stored_materialization(dg.AssetKey("window"), k) is not None]
        assert kept == ["b", "c"]  # the oldest dropped


def test_without_base_dir_or_dagster_home_the_error_says_what_to_set(monkeypatch):
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    with pytest.raises(dg.DagsterInvariantViolationError, match="DAGSTER_HOME"):
        PooledSqliteEventLogStorage.from_config_value(None, {})
