"""The catalog asset: view, source_stats, Parquet exports, and the sensor that refreshes them."""

from __future__ import annotations

import json
import time

import dagster as dg
import duckdb
import pytest

from harvest_pipeline.defs.catalog import CATALOG_JOB, CATALOG_KEY, CATALOG_SENSOR, REFRESH_WHILE_HARVESTING_SECONDS
from harvest_pipeline.defs.batch import BATCH_JOB, batch_run_config
from harvest_pipeline.defs.factory import build_definitions, window_job
from harvest_pipeline.defs.reconcile import reconcile_key
from harvest_pipeline.store import connect
from harvest_pipeline.store.catalog import refresh_catalog
from harvest_pipeline_tests.conftest import day_window, demo_source, learn_facts

pytestmark = pytest.mark.integration


def parquet_rows(path) -> int:
    return duckdb.connect().execute("SELECT count(*) FROM read_parquet(?)", [str(path)]).fetchone()[0]


def live_counts(db_path) -> dict[str, tuple[int, int]]:
    with connect(db_path) as con:
        return {
            s: (live, deleted)
            for s, live, deleted in con.execute(
                "SELECT source_id, count(*) FILTER (WHERE NOT deleted), count(*) FILTER (WHERE deleted)"
                " FROM records GROUP BY 1"
            ).fetchall()
        }


def test_catalog_asset_builds_view_stats_and_one_parquet_per_source(shared_demo, db_path):
    sources = [demo_source(shared_demo), demo_source(shared_demo, id="physics", set="physics")]
    learn_facts(*sources)
    defs = build_definitions(sources)
    graph = defs.resolve_asset_graph()
    assert graph.get(CATALOG_KEY).parent_keys == {
        dg.AssetKey(["harvest", "demo"]), dg.AssetKey(["harvest", "physics"]), reconcile_key("demo"), reconcile_key("physics"),
    }
    with dg.instance_for_test() as instance:
        for source_id, days in (("demo", (2, 3)), ("physics", (2,))):
            for n in days:
                assert window_job(defs, source_id).execute_in_process(
                    partition_key=day_window(n).key, instance=instance
                ).success
        result = defs.resolve_job_def(CATALOG_JOB).execute_in_process(instance=instance)
    assert result.success
    [mat] = result.get_asset_materialization_events()
    meta = {k: v.value for k, v in mat.materialization.metadata.items()}

    counts = live_counts(db_path)
    exports = db_path.parent / "exports"
    assert sorted(p.name for p in exports.iterdir()) == ["demo.parquet", "physics.parquet"]  # no temp files left
    for source_id, (live, deleted) in counts.items():
        entry = meta[source_id]  # one metadata entry per source
        assert (entry["live"], entry["deleted"], entry["quarantined"], entry["export_rows"]) == (live, deleted, 0, live)
        assert parquet_rows(exports / f"{source_id}.parquet") == live
    assert meta["live_total"] == sum(live for live, _ in counts.values())
    # A preview of the newest live records of each source, read from the catalogue itself.
    latest = [r.data for r in meta["latest_records"].records]
    with connect(db_path) as con:
        for source_id in counts:
            newest = con.execute(
                "SELECT identifier, title FROM records WHERE source_id = ? AND NOT deleted"
                " ORDER BY datestamp DESC, identifier LIMIT 5", [source_id],
            ).fetchall()
            assert [(r["identifier"], r["title"]) for r in latest if r["source_id"] == source_id] == newest
    with connect(db_path) as con:
        stats = con.execute("SELECT source_id, live, deleted, quarantined FROM source_stats ORDER BY 1").fetchall()
        view = con.execute("SELECT source_id, count(*), count(title) FROM catalog GROUP BY 1 ORDER BY 1").fetchall()
    assert stats == [(s, live, deleted, 0) for s, (live, deleted) in sorted(counts.items())]
    assert view == [(s, live, live) for s, (live, _) in sorted(counts.items())]
    columns = duckdb.connect().execute(f"DESCRIBE SELECT * FROM read_parquet('{exports / 'demo.parquet'}')").fetchall()
    assert {"identifier", "title", "creators", "doi", "bbox_west", "datestamp"} <= {c[0] for c in columns}


def test_sensor_refreshes_the_catalog_and_exports_whenever_the_catalogue_changes(shared_demo, db_path):
    learn_facts(demo_source(shared_demo))
    defs = build_definitions([demo_source(shared_demo)])
    sensor = defs.resolve_sensor_def(CATALOG_SENSOR)
    assert sensor.default_status == dg.DefaultSensorStatus.RUNNING
    export = db_path.parent / "exports" / "demo.parquet"
    with dg.instance_for_test() as instance:
        assert isinstance(sensor(dg.build_sensor_context(instance=instance, definitions=defs)), dg.SkipReason)  # no catalogue yet

        def harvest(n):
            window_job(defs, "demo").execute_in_process(partition_key=day_window(n).key, instance=instance)

        def tick(cursor):
            return sensor(dg.build_sensor_context(instance=instance, cursor=cursor, definitions=defs))

        def run(request):
            job = defs.resolve_job_def(CATALOG_JOB)
            assert job.execute_in_process(instance=instance, tags=request.tags).success

        harvest(4)
        # A fresh deployment's first refresh waits for the harvest in flight too (at most 10 minutes
        # from the tick that first found it).
        in_flight = instance.create_run_for_job(defs.resolve_job_def(BATCH_JOB),
                                                run_config=batch_run_config({"demo": [day_window(6).key]}))
        waiting = tick(None)
        assert waiting.skip_reason and "being harvested" in waiting.skip_reason.skip_message
        assert tick(waiting.cursor).skip_reason  # still within the 10 minutes
        expired = json.dumps({**json.loads(waiting.cursor), "waiting_since": time.time() - REFRESH_WHILE_HARVESTING_SECONDS - 1})
        assert tick(expired).run_requests  # ... then it refreshes anyway
        instance.delete_run(in_flight.run_id)
        first = tick(None)
        [request] = first.run_requests
        run(request)
        assert parquet_rows(export) == live_counts(db_path)["demo"][0]

        idle = tick(first.cursor)
        assert isinstance(idle, dg.SkipReason) and "not changed" in idle.skip_message

        harvest(5)  # the catalogue changes: the next tick asks for a refresh ...
        # ... but not while windows are being harvested (it waits, at most 10 minutes).
        queued = instance.create_run_for_job(defs.resolve_job_def(BATCH_JOB),
                                             run_config=batch_run_config({"demo": [day_window(6).key]}))
        waiting = tick(first.cursor)
        assert waiting.skip_reason and "being harvested" in waiting.skip_reason.skip_message
        instance.delete_run(queued.run_id)
        second = tick(waiting.cursor)
        [again] = second.run_requests
        assert again.run_key != request.run_key
        run(again)
        assert parquet_rows(export) == live_counts(db_path)["demo"][0] > 0


def test_quarantined_counts_distinct_records_and_is_zero_without_the_table(tmp_path):
    con = duckdb.connect(str(tmp_path / "c.duckdb"))
    con.execute("CREATE TABLE records AS SELECT 'a' AS source_id, 'x' AS identifier, false AS deleted, NULL::TIMESTAMP AS written_at WHERE false")
    for column in ("datestamp TIMESTAMP", "datestamp_raw VARCHAR", "set_specs VARCHAR[]", "metadata_prefix VARCHAR"):
        con.execute(f"ALTER TABLE records ADD COLUMN {column}")
    for column in ("format_name", "title", "creators", "subjects", "description", "date", "type", "language",
                   "identifiers", "doi", "url", "rights", "bbox_west", "bbox_south", "bbox_east", "bbox_north",
                   "mapping_error", "first_seen_at", "written_by_run", "window_start", "window_end"):
        con.execute(f"ALTER TABLE records ADD COLUMN {column} VARCHAR")
    assert refresh_catalog(con, ["a"])[0]["quarantined"] == 0  # no quarantine table yet
    con.execute("CREATE TABLE quarantine (source_id VARCHAR, identifier VARCHAR)")
    con.execute("INSERT INTO quarantine VALUES ('a', 'r1'), ('a', 'r1'), ('a', NULL), ('b', 'r9')")
    stats = {s["source_id"]: s["quarantined"] for s in refresh_catalog(con, ["a"])}
    assert stats == {"a": 2}  # only configured sources and sources with records are listed
