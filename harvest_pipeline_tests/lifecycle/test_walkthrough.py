"""One record's whole life, harvested over HTTP from the demo provider and read back with `show`.

created -> updated (touched upstream) -> unchanged (re-harvest) -> deleted (upstream tombstone)
-> revived (touched after the deletion) -> deleted by reconciliation (gone from a server that
stopped reporting deletions), the last step through a real Dagster materialization.
"""

from __future__ import annotations

import json
from datetime import timedelta

import dagster as dg
import pytest

from harvest_pipeline.defs.factory import build_definitions
from harvest_pipeline.defs.reconcile import GUARD_CHECK, RECONCILE_JOB
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.store import connect
from harvest_pipeline_tests.conftest import today, day_window, demo_source
from harvest_pipeline_tests.lifecycle.helpers import (
    cli_env,
    history_actions,
    live_identifiers,
    record_row,
    run_cli,
)

pytestmark = pytest.mark.integration


def test_one_record_through_every_step_of_its_life(demo, db_path, tmp_path):
    source = demo_source(demo)
    first = day_window(5)
    harvest_window(source, first, db_path=db_path)
    with connect(db_path) as con:
        rid = con.execute(
            "SELECT identifier FROM records WHERE NOT deleted AND datestamp >= ? AND datestamp < ? ORDER BY identifier LIMIT 1",
            [first.start.replace(tzinfo=None), first.end.replace(tzinfo=None)],
        ).fetchone()[0]
    assert history_actions(db_path, rid)[-1][0] == "created"

    last = day_window(1)  # every later version of the record lands in yesterday's window
    demo.touch(rid, at=today() - timedelta(hours=3))
    assert harvest_window(source, last, db_path=db_path).counts.updated == 1
    harvest_window(source, last, db_path=db_path)  # the same version again
    demo.delete(rid, at=today() - timedelta(hours=2))
    assert harvest_window(source, last, db_path=db_path).counts.deleted == 1
    assert record_row(db_path, rid)["deleted"] is True
    demo.touch(rid, at=today() - timedelta(hours=1))
    assert harvest_window(source, last, db_path=db_path).counts.revived == 1
    assert record_row(db_path, rid)["deleted"] is False

    # The server now forgets its deletions: the record simply disappears from every list.
    demo.delete(rid, at=today() - timedelta(minutes=30))
    demo.set_options(deleted_record="no")
    live_before = live_identifiers(db_path)
    defs = build_definitions([source])
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def(RECONCILE_JOB).execute_in_process(instance=instance)
    assert result.success
    [check] = result.get_asset_check_evaluations()
    assert (check.check_name, check.passed) == (GUARD_CHECK, True)
    meta = {k: v.value for k, v in result.get_asset_materialization_events()[0].materialization.metadata.items()}
    assert (meta["missing"], meta["deleted"], meta["verb"]) == (1, 1, "ListIdentifiers")
    assert live_identifiers(db_path) == live_before - {rid}
    row = record_row(db_path, rid)
    assert row["deleted"] is True and row["title"] is None and row["metadata_xml"] is None
    assert row["written_by_run"] == result.run_id

    actions = history_actions(db_path, rid)
    assert [a for a, _, _ in actions] == ["created", "updated", "unchanged", "deleted", "revived", "deleted"]
    assert actions[-1][1:] == (f"reconcile:{result.run_id}", result.run_id)

    env = cli_env(tmp_path, db_path)
    shown = run_cli("show", "demo", rid, "--json", env=env, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    doc = json.loads(shown.stdout)
    assert doc["record"]["deleted"] is True
    assert doc["record"]["written_by"]["kind"] == "reconcile"
    assert [h["action"] for h in doc["history"]] == ["created", "updated", "unchanged", "deleted", "revived", "deleted"]
    assert [h["origin"] for h in doc["history"]] == ["window"] * 5 + ["reconcile"]
    assert [h["window"] for h in doc["history"][:5]] == [first.key] + [last.key] * 4
    assert doc["history"][-1]["run_id"] == result.run_id

    text = run_cli("show", "demo", rid, env=env, cwd=tmp_path)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert "DELETED (tombstone)" in text.stdout and "reconciliation" in text.stdout
    steps = [line.split()[1] for line in lines[lines.index(next(l for l in lines if l.startswith("History"))) + 2:]]
    assert steps == ["created", "updated", "unchanged", "deleted", "revived", "deleted"]

    missing = run_cli("show", "demo", "oai:nowhere:1", env=env, cwd=tmp_path)
    assert missing.returncode == 1 and "not in the catalogue" in missing.stderr
