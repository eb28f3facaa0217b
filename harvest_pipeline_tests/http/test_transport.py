"""The transport under the protocol clients: retries, Retry-After, politeness, caps, gzip, redaction.

Real HTTP over 127.0.0.1: the demo provider's fault modes (a subprocess), or the small recording
server of recorder.py (the `rec` fixture) for what the demo cannot express (server-side
concurrency and arrival times, Retry-After enforcement, huge bodies, echoing POSTs, a 404).
"""

from __future__ import annotations

import email.utils
import itertools
import logging
import os
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from harvest_pipeline.demo import start_demo_provider
from harvest_pipeline.errors import (
    DeferredError,
    HTTPStatusError,
    ResponseTooLarge,
    TransportError,
)
from harvest_pipeline.http import Transport, host_key, parse_retry_after, redact_url
from harvest_pipeline.oai import OAIClient
from harvest_pipeline.sources.registry import HttpSettings

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
FAST = {"backoff_base_seconds": 0.001, "backoff_max_seconds": 0.01}


def settings(**kw) -> HttpSettings:
    return HttpSettings(**{"max_retries": 3, "timeout_seconds": 10, **FAST, **kw})


# ---------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def provider():
    with start_demo_provider(days=2, records_per_day=20, page_size=6, end_day="2026-10-02",
                             now="2026-10-10T00:00:00Z") as p:
        yield p


@pytest.fixture
def demo(provider):
    provider.set_options(faults="none")
    yield provider
    provider.set_options(faults="none")


def client_for(p, **kw) -> OAIClient:
    events = kw.pop("events", None)
    return OAIClient(p.url, http=kw.pop("http", settings()), on_event=events.append if events is not None
                     else None, **kw)


# ------------------------------------------------------------------------------ retries


@pytest.mark.parametrize("status", [429, 500, 502, 503, 504])
def test_retries_each_retryable_status_then_succeeds(demo, status):
    demo.set_options(fail_every=2, fail_status=status)
    events = []
    c = client_for(demo, events=events)
    c.identify()  # request 1: fine
    info = c.identify()  # request 2 fails, request 3 answers
    assert info.repository_name
    assert demo.faults()["requests"] == 3
    assert [(e.kind, e.reason, e.status_code) for e in events] == [
        ("retry", f"HTTP {status}", status), ("recovered", "", None)]
    assert c.transport.drain_warnings() == [
        f"retried 1x (HTTP {status} x1), then succeeded: GET {demo.url}?verb=Identify"]
    assert c.transport.stats["retries"] == 1 and c.transport.drain_events() == []


@pytest.mark.parametrize("faults,reason", [
    ({"truncate_every": 2}, "truncated body"),
    ({"truncate_every": 2, "truncate_style": "chunked"}, "truncated body"),
    ({"empty_body_every": 2}, "empty body"),
    ({"slow_ms": 3000, "slow_every": 5}, "ReadTimeout"),
])
def test_retries_broken_bodies_and_timeouts_then_succeeds(demo, faults, reason):
    clean = [r.identifier for r in client_for(demo).list_records("oai_dc")]
    demo.set_options(**faults)
    events = []
    c = client_for(demo, events=events, http=settings(timeout_seconds=0.5))
    got = [r.identifier for r in c.list_records("oai_dc")]
    assert got == clean and len(clean) > 12  # several pages
    retries = [e for e in events if e.kind == "retry"]
    assert retries and {e.reason for e in retries} == {reason}
    assert sum(e.kind == "recovered" for e in events) == len(retries)


def test_the_network_faults_of_the_preset_together_change_nothing(demo):
    clean = [(r.identifier, r.datestamp, r.metadata_xml) for r in client_for(demo).list_records("oai_dc")]
    demo.set_options(fail_every=3, truncate_every=4, empty_body_every=5, slow_ms=20, gzip="header")
    c = client_for(demo, http=settings(max_retries=5))
    got = [(r.identifier, r.datestamp, r.metadata_xml) for r in c.list_records("oai_dc")]
    assert got == clean
    assert c.transport.stats["retries"] >= 3


def test_retries_exhausted_names_the_url_and_the_last_status(demo):
    demo.set_options(fail_every=1, fail_status=502)
    events = []
    c = client_for(demo, events=events, http=settings(max_retries=2))
    with pytest.raises(HTTPStatusError) as ei:
        c.identify()
    e = ei.value
    assert isinstance(e, TransportError) and e.status_code == 502
    text = str(e)
    assert f"{demo.url}?verb=Identify" in text and "HTTP 502" in text
    assert "gave up after 3 attempts (HTTP 502 x3)" in text and "max_retries" in text
    assert demo.faults()["requests"] == 3
    assert [ev.kind for ev in events] == ["retry", "retry", "gave_up"]


def test_connection_refused_is_retried_then_names_the_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    events = []
    t = Transport(settings(max_retries=2), on_event=events.append)
    with pytest.raises(TransportError, match="ConnectionError") as ei:
        t.get(f"http://127.0.0.1:{port}/oai?verb=Identify")
    assert f"127.0.0.1:{port}/oai?verb=Identify" in str(ei.value)
    assert [e.kind for e in events] == ["retry", "retry", "gave_up"]


def test_non_retryable_status_fails_at_once(rec):
    t = Transport(settings())
    with pytest.raises(HTTPStatusError) as ei:
        t.get(rec.base + "/status?code=404")
    assert ei.value.status_code == 404 and "base URL" in str(ei.value)
    assert len(rec.log) == 1


# -------------------------------------------------------------------------- Retry-After


@pytest.mark.parametrize("form", ["delta", "date"])
def test_retry_after_is_honoured_in_both_forms(rec, form):
    # The server answers 503 + Retry-After, and 503 again to any retry that comes too early:
    # with a single retry allowed, success proves the client waited as asked.
    events = []
    t = Transport(settings(max_retries=1), on_event=events.append)
    resp = t.get(f"{rec.base}/strict?key={form}&form={form}")
    assert resp.status_code == 200 and resp.attempts == 2
    (retry,) = [e for e in events if e.kind == "retry"]
    if form == "delta":
        assert retry.retry_after == "1" and retry.delay_seconds == 1
    else:
        assert retry.retry_after.endswith(" GMT") and 0 < retry.delay_seconds <= 2
    assert len(rec.log) == 2


@pytest.mark.parametrize("value", ["3600", "date:3600"])
def test_retry_after_beyond_the_cap_defers(demo, value):
    demo.set_options(fail_every=1, fail_status=503, retry_after=value)
    events = []
    c = client_for(demo, events=events, http=settings(retry_after_cap_seconds=300))
    with pytest.raises(DeferredError) as ei:
        c.identify()
    e = ei.value
    assert 3590 < e.retry_after_seconds <= 3602
    assert demo.url in str(e) and "come back later" in str(e) and "deferred" in str(e)
    assert demo.faults()["requests"] == 1  # no retry
    assert [ev.kind for ev in events] == ["deferred"]
    assert "deferred: the server asked to come back in" in c.transport.drain_warnings()[0]


def test_parse_retry_after():
    now = 1_800_000_000.0
    assert parse_retry_after("120", now) == 120
    assert parse_retry_after(" 0 ", now) == 0
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0
    assert parse_retry_after("Sunday, 06-Nov-94 08:49:37 GMT", now) == 0  # obsolete form, past
    assert parse_retry_after("soon", now) is None and parse_retry_after(None) is None


# ----------------------------------------------------------------------------- politeness

CHILD = textwrap.dedent("""
    import sys
    from harvest_pipeline.http import Transport
    from harvest_pipeline.sources.registry import HttpSettings
    url, state, n, conc, interval = sys.argv[1:6]
    t = Transport(HttpSettings(max_retries=0, max_concurrent_requests=int(conc),
                               min_request_interval_seconds=float(interval)), state_dir=state)
    for _ in range(int(n)):
        t.get(url)
""")


def run_children(url: str, state: Path, n: int, conc: int, interval: float, procs: int = 2):
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    children = [subprocess.Popen([sys.executable, "-c", CHILD, url, str(state), str(n), str(conc),
                                  str(interval)], env=env, stderr=subprocess.PIPE)
                for _ in range(procs)]
    for c in children:
        _, err = c.communicate(timeout=60)
        assert c.returncode == 0, err.decode()


def test_two_processes_sharing_a_state_dir_keep_one_request_in_flight(rec, tmp_path):
    run_children(rec.base + "/oai?ms=150", tmp_path / "hosts", n=4, conc=1, interval=0)
    assert len(rec.log) == 8
    assert len({r["port"] for r in rec.log}) >= 2  # really two clients
    assert rec.max_in_flight == 1
    assert sorted(p.name for p in (tmp_path / "hosts").iterdir()) == ["127.0.0.1_" + str(
        rec.server_address[1]) + ".slot0.lock"]


def test_two_processes_sharing_a_state_dir_keep_the_minimum_interval(rec, tmp_path):
    run_children(rec.base + "/oai", tmp_path / "hosts", n=3, conc=2, interval=0.3)
    starts = sorted(r["t"] for r in rec.log)
    assert len(starts) == 6
    gaps = [b - a for a, b in itertools.pairwise(starts)]
    assert min(gaps) >= 0.2, gaps  # 0.3 s asked; generous for scheduling noise


def test_threads_without_a_state_dir_share_in_process_slots(rec):
    def burst(transport_for, threads=4):
        barrier = threading.Barrier(threads)

        def one(t):
            barrier.wait()
            t.get(rec.base + "/oai?ms=300")

        ts = [threading.Thread(target=one, args=(transport_for(),)) for _ in range(threads)]
        for th in ts:
            th.start()
        for th in ts:
            th.join(30)

    burst(lambda: Transport(settings(max_concurrent_requests=8)))
    assert rec.max_in_flight >= 2  # the instrument sees overlap when nothing limits it
    rec.max_in_flight = 0
    burst(lambda: Transport(settings(max_concurrent_requests=1)))
    assert rec.max_in_flight == 1


def test_host_key():
    assert host_key("http://Example.org/oai") == "example.org"
    assert host_key("https://user:pw@example.org:8443/x") == "example.org_8443"


# ------------------------------------------------------------------ size caps and encodings


@pytest.mark.parametrize("chunked", [False, True])
def test_response_cap(rec, chunked):
    t = Transport(settings(max_response_mb=1))
    url = rec.base + "/big?mb=3" + ("&chunked=1" if chunked else "")
    with pytest.raises(ResponseTooLarge) as ei:
        t.get(url)
    assert "1 MB" in str(ei.value) and url in str(ei.value) and "max_response_mb" in str(ei.value)
    assert ei.value.limit_bytes == 1024 * 1024
    assert len(rec.log) == 1  # not retried
    assert len(t.get(rec.base + "/big?mb=0.5").content) > 500_000


def test_gzip_with_header_and_sniffed_gzip_are_decoded(demo):
    clean = [r.identifier for r in client_for(demo).list_records("oai_dc")]
    demo.set_options(gzip="header")
    c = client_for(demo)
    _, _, resp = c._get({"verb": "Identify"})
    assert resp.encoding == "gzip" and resp.raw_bytes < len(resp.content)
    assert [r.identifier for r in c.list_records("oai_dc")] == clean
    demo.set_options(gzip="sniff")
    _, _, resp = c._get({"verb": "Identify"})
    assert resp.sniffed_gzip and resp.encoding is None
    assert [r.identifier for r in c.list_records("oai_dc")] == clean


@pytest.mark.parametrize("mode,note", [("header", "after gzip decompression"),
                                       ("sniff", "without a Content-Encoding header")])
def test_gzip_bomb_is_refused(demo, mode, note):
    demo.set_options(gzip_bomb=mode)
    c = client_for(demo, http=settings(max_response_mb=8))
    with pytest.raises(ResponseTooLarge) as ei:
        c.identify()
    text = str(ei.value)
    assert "exceeds the cap of 8 MB" in text and note in text and demo.url in text
    assert demo.faults()["requests"] == 1


def test_post_goes_through_the_same_transport(rec):
    t = Transport(settings())
    xml = b"<csw:GetRecords xmlns:csw='http://www.opengis.net/cat/csw/2.0.2'/>"
    resp = t.post(rec.base + "/echo", data=xml, headers={"Content-Type": "application/xml"})
    assert resp.content == xml and rec.log[0]["headers"]["Content-Type"] == "application/xml"
    assert rec.log[0]["headers"]["Accept-Encoding"] == "gzip, deflate"


def test_one_session_keeps_the_connection_alive(rec):
    t = Transport(settings())
    for _ in range(3):
        t.get(rec.base + "/oai")
    assert len({r["port"] for r in rec.log}) == 1


# ---------------------------------------------------------------------------- credentials


def test_credentials_never_appear_in_errors_events_or_logs(rec, caplog):
    caplog.set_level(logging.DEBUG)
    events = []
    url = rec.base.replace("http://", "http://alice:s3cr3t-pw@") + "/status?code=503"
    c = OAIClient(url, headers={"X-Api-Key": "KEY-123-very-secret"}, http=settings(max_retries=2),
                  on_event=events.append)
    with pytest.raises(HTTPStatusError) as ei:
        c.identify()
    # ...and an error that quotes the URL from inside requests (nothing listens there)
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead = s.getsockname()[1]
    s.close()
    c2 = OAIClient(f"http://127.0.0.1:{dead}/oai?api_key=QUERY-SECRET-1", auth=("bob", "pa55-word-2"),
                   headers={"Authorization": "Bearer TOKEN-XYZ-3"}, http=settings(max_retries=1),
                   on_event=events.append)
    with pytest.raises(TransportError) as ei2:
        c2.identify()
    seen = "\n".join([str(ei.value), repr(ei.value), str(ei2.value), caplog.text,
                      *map(str, events), *c.transport.drain_warnings()])
    assert caplog.text and len(events) >= 4
    for secret in ("s3cr3t-pw", "alice", "KEY-123-very-secret", "QUERY-SECRET-1", "pa55-word-2",
                   "TOKEN-XYZ-3"):
        assert secret not in seen, secret
    assert "api_key=***" in str(ei2.value)
    # the credentials were really sent
    assert rec.log[0]["headers"]["Authorization"].startswith("Basic ")
    assert rec.log[0]["headers"]["X-Api-Key"] == "KEY-123-very-secret"
    assert "alice" not in rec.log[0]["path"]


def test_redact_url():
    assert redact_url("see http://u:p@h.org/x?a=1&api_key=K&apikey=L") == (
        "see http://***@h.org/x?a=1&api_key=***&apikey=***")
    assert redact_url("http://h.org/oai?verb=ListRecords&resumptionToken=abc") == (
        "http://h.org/oai?verb=ListRecords&resumptionToken=abc")
