"""Server facts: stored when learned, read at load; loading the definitions never opens a connection."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import dagster as dg
import pytest

from harvest_pipeline.defs.facts import FACTS_JOB, facts_run_config
from harvest_pipeline.defs.factory import build_definitions
from harvest_pipeline.defs.sensors import SENSOR_NAME
from harvest_pipeline.demo.process import start_demo_provider
from harvest_pipeline.harvest.server_facts import (
    describe_server,
    facts_path,
    merge_facts,
    read_facts,
    remember,
    shapes_definitions,
)
from harvest_pipeline.sources import SourceConfig
from harvest_pipeline.bench.defs_load_section import CountingListener
from harvest_pipeline_tests.conftest import demo_options, today, demo_source

pytestmark = pytest.mark.integration
ASSET = dg.AssetKey(["harvest", "demo"])


def test_loading_the_definitions_twice_opens_no_connection(tmp_path):
    listener = CountingListener()
    try:
        base = f"http://127.0.0.1:{listener.port}"
        (tmp_path / "sources.yaml").write_text(
            "sources:\n"
            f"  - id: first\n    url: {base}/oai\n"
            f"  - id: second\n    url: {base}/oai?api_key=s3cret\n    window: week\n"
            f"  - id: third\n    protocol: csw\n    url: {base}/csw\n"
        )
        env = {**os.environ, "HARVEST_SOURCES_FILE": str(tmp_path / "sources.yaml"),
               "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb")}
        code = (
            "import importlib, harvest_pipeline.definitions as d\n"
            "importlib.reload(d)\n"
            "import dagster as dg\n"
            "a = d.defs.resolve_assets_def(dg.AssetKey(['harvest', 'first']))\n"
            "print(len(a.partitions_def.get_partition_keys()), a.descriptions_by_key[a.key])\n"
        )
        out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
    finally:
        listener.close()
    assert listener.accepted == 0
    partitions, description = out.stdout.split(" ", 1)
    assert partitions == "0" and "UNKNOWN" in description and "server_facts_refresh" in description


def test_facts_are_learned_stored_without_secrets_and_pinned(tmp_path, db_path):
    with start_demo_provider(**demo_options()) as provider:
        plain = demo_source(provider)
        described = describe_server(plain)
        earliest = provider.stats()["earliest"]
    # The same server behind a URL that carries a key (the demo itself refuses unknown arguments).
    source = SourceConfig(id="demo", url=plain.url + "?api_key=s3cret")
    facts, changed = remember(source, db_path, described, learned_by="test")
    assert changed and facts.earliest_datestamp == earliest and facts.deleted_record == "persistent"
    text = facts_path(db_path, "demo").read_text()
    assert "s3cret" not in text and "api_key" not in text and "url-sha256:" in text
    assert list(facts_path(db_path, "demo").parent.iterdir()) == [facts_path(db_path, "demo")]  # no temp file left

    # The definitions start at the stored earliest date, with no server running at all.
    keys = build_definitions([source]).resolve_assets_def(ASSET).partitions_def.get_partition_keys()
    assert keys[0] == earliest[:10] and keys[-1] < today().strftime("%Y-%m-%d")

    # A server whose records now begin later does not move the partitions start (keys never
    # vanish); one whose records begin earlier extends it.
    later = merge_facts(source, facts, {**asdict(facts), "earliest_datestamp": "2099-01-01T00:00:00Z"}, learned_by="t")
    assert later.partitions_start == facts.partitions_start and not shapes_definitions(facts, later)
    earlier = merge_facts(source, facts, {**asdict(facts), "earliest_datestamp": "2001-02-03T00:00:00Z"}, learned_by="t")
    assert earlier.partitions_start.startswith("2001-02-03") and shapes_definitions(facts, earlier)


def test_sensor_requests_the_refresh_job_which_stores_the_facts(demo, db_path):
    source = demo_source(demo)
    defs = build_definitions([source])  # nothing stored yet: no partitions offered
    assert defs.resolve_assets_def(ASSET).partitions_def.get_partition_keys() == []
    sensor = defs.resolve_sensor_def(SENSOR_NAME)
    with dg.instance_for_test() as instance:
        tick = sensor(dg.build_sensor_context(instance=instance, definitions=defs))
        [request] = tick.run_requests
        assert request.job_name == FACTS_JOB and request.run_config == facts_run_config(["demo"])
        again = sensor(dg.build_sensor_context(instance=instance, definitions=defs, cursor=tick.cursor))
        assert isinstance(again, dg.SkipReason) or not again.run_requests  # not every tick

        result = defs.resolve_job_def(FACTS_JOB).execute_in_process(instance=instance, run_config=request.run_config)
        assert result.success
        assert read_facts(source, db_path).earliest_datestamp == demo.stats()["earliest"]
        after = sensor(dg.build_sensor_context(instance=instance, definitions=defs, cursor=tick.cursor))
        assert "reload the code location" in after.skip_reason.skip_message
    reloaded = build_definitions([source]).resolve_assets_def(ASSET).partitions_def.get_partition_keys()
    assert reloaded[0] == demo.stats()["earliest"][:10]


def test_facts_command_refreshes_and_shows(tmp_path, demo, sources_file):
    sources_file(demo=demo)
    env = {**os.environ, "HARVEST_DUCKDB_PATH": str(tmp_path / "data" / "harvest.duckdb")}
    run = lambda *a: subprocess.run([sys.executable, "-m", "harvest_pipeline.cli", "facts", *a],  # noqa: E731
                                    env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    before = run("--show")
    assert before.returncode == 0 and "demo: not known yet" in before.stdout
    done = run()
    assert done.returncode == 0, done.stderr
    assert "demo: granularity YYYY-MM-DDThh:mm:ssZ" in done.stdout and "deletedRecord persistent" in done.stdout
    stored = json.loads(Path(tmp_path / "data" / "server_facts" / "demo.json").read_text())
    assert stored["earliest_datestamp"] == demo.stats()["earliest"]
    assert "(unchanged)" in run("demo").stdout
    assert run("nope").returncode == 2
