"""Configured secrets never reach storage or output (issue 11, item 3).

A server on 127.0.0.1 echoes everything it was sent (API key header, Basic credentials, a
`token=` query value) into its OAI-PMH error text. The window fails; the secrets must not appear
in the error, the ledger, `harvest-pipeline status`, Dagster's event log or the logs. The
sources file writes the key as `${VAR}` under a parameter name no list would know.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit
from xml.sax.saxutils import escape

import dagster as dg
import pytest

from harvest_pipeline.defs.factory import build_definitions, window_job
from harvest_pipeline.harvest.server_facts import facts_dir, refresh_facts
from harvest_pipeline.errors import HarvestError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.http.redaction import redact_text
from harvest_pipeline.sources import load_sources
from harvest_pipeline.store import connect
from harvest_pipeline_tests.conftest import day_window
from harvest_pipeline_tests.http.hostile import RawServer, response_head
from harvest_pipeline_tests.oai.canned import error
from harvest_pipeline_tests.oai.test_parse import identify_xml

pytestmark = pytest.mark.integration

HEADER_KEY = "hdr-KEY-7f3a9c"
USER, PASSWORD = "harvest-user-x", "pw-Q8s7d6"
TOKEN = "tok-ZZ81-secret"  # the value of `token=` in the source URL
OTHER = "sig-5551-otherparam"  # the value of `wsk=`, a name nothing knows, written as ${VAR}
SECRETS = (HEADER_KEY, USER, PASSWORD, TOKEN, OTHER)


def _echoing(conn, req) -> None:
    query = parse_qs(urlsplit(req.path).query)
    if query.get("verb") == ["Identify"]:
        body = identify_xml()
    else:
        basic = base64.b64decode(req.headers["authorization"].split()[1]).decode()
        body = error("badArgument", escape(f"key {req.headers.get('x-api-key')} not valid for {basic} "
                                           f"(asked {req.path})"))
    conn.sendall(response_head("200 OK", {"Content-Type": "text/xml", "Content-Length": str(len(body))}) + body)


@pytest.fixture
def echo_source(tmp_path, monkeypatch, db_path):
    monkeypatch.setenv("ECHO_KEY", HEADER_KEY)
    monkeypatch.setenv("ECHO_USER", USER)
    monkeypatch.setenv("ECHO_PASSWORD", PASSWORD)
    monkeypatch.setenv("ECHO_WSK", OTHER)
    with RawServer(_echoing) as srv:
        path = tmp_path / "sources.yaml"
        path.write_text(
            "sources:\n"
            "  - id: echo\n"
            f"    url: {srv.url('/oai')}?token={TOKEN}&wsk=${{ECHO_WSK}}\n"
            # The month of the window the tests harvest (two days ago: on the 1st or 2nd of a
            # month, the first of this month would leave it outside the partitions).
            f"    start: {day_window(2).start.replace(day=1).date()}\n"
            "    headers_from_env: {X-Api-Key: ECHO_KEY}\n"
            "    auth: {username_env: ECHO_USER, password_env: ECHO_PASSWORD}\n"
            "    http: {max_retries: 0}\n"
        )
        monkeypatch.setenv("HARVEST_SOURCES_FILE", str(path))
        [source] = load_sources(path)
        yield source, srv


def _assert_clean(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} in {where}: {text[:2000]}"


def test_a_server_echoing_the_secrets_leaks_them_nowhere(echo_source, db_path, tmp_path, caplog):
    source, srv = echo_source
    caplog.set_level(logging.DEBUG)
    with pytest.raises(HarvestError) as err:
        harvest_window(source, day_window(2), db_path=db_path)
    # The secrets really went out, and the server really echoed them.
    sent = srv.requests[-1]
    assert sent.headers["x-api-key"] == HEADER_KEY and TOKEN in sent.path and OTHER in sent.path
    assert "badArgument" in str(err.value) and "not valid for ***" in str(err.value)
    _assert_clean(str(err.value) + repr(err.value) + " ".join(map(str, err.value.args)), "the error")
    with connect(db_path) as con:
        stored = con.execute("SELECT error, warnings FROM harvest_windows").fetchall()
    assert stored and stored[0][0]
    _assert_clean(repr(stored), "the ledger")
    _assert_clean(caplog.text, "the log")

    env = {**os.environ, "HARVEST_DUCKDB_PATH": str(db_path)}
    for args in (["status"], ["status", "--json"]):
        out = subprocess.run([sys.executable, "-m", "harvest_pipeline.cli", *args], env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stderr
        _assert_clean(out.stdout + out.stderr, f"`harvest-pipeline {' '.join(args)}`")
        assert "token=***" in out.stdout and "wsk=***" in out.stdout and "badArgument" in out.stdout


def test_dagster_run_storage_never_holds_the_secrets(echo_source, db_path):
    source, _ = echo_source
    defs = build_definitions([source])
    with dg.instance_for_test() as instance:
        result = window_job(defs, "echo").execute_in_process(
            partition_key=day_window(2).key, instance=instance, raise_on_error=False)
        assert not result.success
        stored = [dg.serialize_value(e) for e in instance.all_logs(result.run_id)]
    failure = [s for s in stored if "STEP_FAILURE" in s]
    assert failure and any("badArgument" in s for s in failure)
    _assert_clean("\n".join(stored), "Dagster's event log")


def test_status_url_and_stored_server_facts_are_redacted(echo_source, db_path):
    source, _ = echo_source
    assert redact_text(source.url).endswith("?token=***&wsk=***")
    refresh_facts(source.model_copy(update={"start": None}), db_path, learned_by="test")
    [stored] = facts_dir(db_path).glob("*.json")
    facts = stored.read_text()
    assert json.loads(facts)["earliest_datestamp"]
    _assert_clean(facts, "the stored server facts")
