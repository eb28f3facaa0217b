"""The transport against hostile and buggy servers on 127.0.0.1 (issue 11, items 1, 2 and 10).

Raw-socket servers (``hostile.py``) where bytes and timing matter: headers or a body trickled one
byte at a time, redirects to another origin, pycsw's gzip body with the uncompressed
Content-Length. The window-level cases put the gzip bug in front of the real demo provider.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from harvest_pipeline.errors import BudgetExceeded, TransportError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.http import Transport
from harvest_pipeline.oai import OAIClient
from harvest_pipeline.sources.registry import HttpSettings, SourceConfig
from harvest_pipeline.store import ledger
from harvest_pipeline_tests.conftest import today, day_window, demo_source, window_stats
from harvest_pipeline_tests.http.hostile import (
    GzipLyingProxy,
    RawServer,
    gzip_lying_length,
    response_head,
    trickle,
)
from harvest_pipeline_tests.oai.test_parse import identify_xml

pytestmark = pytest.mark.integration
FAST = {"backoff_base_seconds": 0.001, "backoff_max_seconds": 0.01}


# --------------------------------------------------------------- item 1: one deadline per request


@pytest.mark.parametrize("phase", ["headers", "body", "body-keep-alive"])
def test_a_trickling_server_is_cut_off_at_the_request_deadline(phase):
    # One byte every 0.2 s never trips the 0.5 s silence limit; the deadline (10 x 0.5 s by
    # default) must end the request anyway, whether the headers or the body trickle.
    stop = threading.Event()
    body = identify_xml()

    def handle(conn: socket.socket, req) -> None:
        if phase == "headers":
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            trickle(conn, b"X-Slow: " + b"a" * 400 + b"\r\n\r\n", 0.2, stop, limit=25)
        else:
            conn.sendall(response_head("200 OK", {
                "Content-Type": "text/xml", "Content-Length": str(len(body)),
                "Connection": "keep-alive" if phase == "body-keep-alive" else "close"}))
            trickle(conn, body, 0.2, stop, limit=25)

    with RawServer(handle) as srv:
        t = Transport(HttpSettings(max_retries=0, timeout_seconds=0.5, **FAST))
        started = time.monotonic()
        with pytest.raises(TransportError) as ei:
            t.get(srv.url("/oai?verb=Identify"))
        took = time.monotonic() - started
        stop.set()
    text = str(ei.value)
    assert took < 8, f"held {took:.1f} s for a 5 s deadline"
    assert "request deadline of 5 s" in text and srv.url("/oai?verb=Identify") in text
    assert ("headers" if phase == "headers" else "body") in text
    assert "http.request_deadline_seconds" in text  # what to do


def test_the_deadline_is_retried_and_a_window_never_outlives_its_time_budget(db_path):
    # Every answer trickles: the request deadline (1 s) ends each attempt, retries follow the
    # policy, and the traversal's time budget (3 s) ends the window whatever retries remain.
    stop = threading.Event()

    def handle(conn, req) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\n")
        trickle(conn, b"X-Slow: " + b"a" * 400 + b"\r\n\r\n", 0.1, stop, limit=25)

    with RawServer(handle) as srv:
        source = SourceConfig(
            id="slow", url=srv.url("/oai"), start=today(),
            http=HttpSettings(max_retries=50, timeout_seconds=0.5, request_deadline_seconds=1, **FAST),
            traversal={"max_seconds": 3},
        )
        with pytest.raises(BudgetExceeded) as ei:
            harvest_window(source, day_window(1), db_path=db_path)
        ended = time.time()
        stop.set()
    # Counted from the first request, so a loaded machine's slower catalogue set-up does not count:
    # the budget (3 s), then at most the attempt it interrupted (its deadline, 1 s), then the error.
    took = ended - srv.requests[0].at
    assert took < 3 + 1 + 0.5, took
    assert 2 <= len(srv.requests) <= 4  # retried, but only within the budget
    text = str(ei.value)
    assert "guard 'time-limit'" in text and "traversal.max_seconds" in text and "source=slow" in text


# ------------------------------------------------------------------------- item 2: redirects


def _redirecting(to: str, status: str = "302 Found"):
    def handle(conn, req) -> None:
        conn.sendall(response_head(status, {"Location": to + req.path.partition("?")[1]
                                            + req.path.partition("?")[2], "Content-Length": "0"}))
    return handle


def _answering(conn, req) -> None:
    body = identify_xml()
    conn.sendall(response_head("200 OK", {"Content-Type": "text/xml", "Content-Length": str(len(body))}) + body)


SECRETS = {"X-Api-Key": "HDR-SECRET-1234"}


def test_a_redirect_to_another_origin_is_refused_and_nothing_reaches_it():
    with RawServer(_answering) as other, RawServer(_redirecting(other.url("/oai"))) as first:
        c = OAIClient(first.url("/oai?api_key=QUERY-SECRET-99"), headers=SECRETS, auth=("alice", "pw-SECRET-5"),
                      http=HttpSettings(max_retries=2, **FAST))
        with pytest.raises(TransportError) as ei:
            c.identify()
    text = str(ei.value)
    assert "another origin" in text and "not followed" in text and "allow_cross_origin_redirects" in text
    assert other.requests == [] and len(first.requests) == 1  # refused at once, not retried
    for secret in ("HDR-SECRET-1234", "QUERY-SECRET-99", "pw-SECRET-5"):
        assert secret not in text


def test_an_allowed_cross_origin_redirect_never_carries_the_secrets():
    with RawServer(_answering) as other, RawServer(_redirecting(other.url("/oai"), "307 Temporary Redirect")) as first:
        c = OAIClient(first.url("/oai?api_key=QUERY-SECRET-99"), headers=SECRETS, auth=("alice", "pw-SECRET-5"),
                      http=HttpSettings(max_retries=0, allow_cross_origin_redirects=True))
        info = c.identify()
        warnings = c.transport.drain_warnings()
    assert info.repository_name
    sent = first.requests[0]
    assert sent.headers["x-api-key"] == "HDR-SECRET-1234" and sent.headers["authorization"].startswith("Basic ")
    [there] = other.requests
    assert "x-api-key" not in there.headers and "authorization" not in there.headers
    assert "QUERY-SECRET-99" not in there.path and "api_key" not in there.path and "verb=Identify" in there.path
    [said] = warnings
    assert "HTTP 307" in said and "another origin" in said and other.url("/oai") in said
    assert "QUERY-SECRET-99" not in said


def test_same_origin_redirects_are_followed_with_the_secrets_and_each_is_a_warning():
    state = {}

    def handle(conn, req) -> None:
        if req.path.startswith("/old"):
            conn.sendall(response_head("301 Moved Permanently", {
                "Location": "/oai?" + req.path.partition("?")[2], "Content-Length": "0"}))
        else:
            state["seen"] = req.headers
            _answering(conn, req)

    with RawServer(handle) as srv:
        c = OAIClient(srv.url("/old"), headers=SECRETS, http=HttpSettings(max_retries=0))
        assert c.identify().repository_name
        [said] = c.transport.drain_warnings()
    assert state["seen"]["x-api-key"] == "HDR-SECRET-1234"
    assert "HTTP 301, permanent" in said and "update the source's url" in said and srv.url("/oai") in said


# ---------------------------------------------------------- item 10: pycsw's gzip Content-Length


def test_a_whole_gzip_member_with_the_uncompressed_content_length_is_accepted_with_a_warning():
    body = identify_xml()
    with RawServer(lambda conn, req: gzip_lying_length(conn, body)) as srv:
        c = OAIClient(srv.url("/oai"), http=HttpSettings(max_retries=3, **FAST))
        info = c.identify()
        [said] = c.transport.drain_warnings()
    assert info.repository_name
    assert len(srv.requests) == 1  # not retried
    assert "gzip-content-length-uncompressed" in said and "CRC-32" in said and srv.url("/oai") in said


def test_a_gzip_member_cut_short_is_still_a_truncated_body():
    body = identify_xml()
    with RawServer(lambda conn, req: gzip_lying_length(conn, body, cut=6)) as srv:
        c = OAIClient(srv.url("/oai"), http=HttpSettings(max_retries=2, **FAST))
        with pytest.raises(TransportError) as ei:
            c.identify()
    assert "truncated body" in str(ei.value) and len(srv.requests) == 3


@pytest.mark.parametrize("protocol", ["oai-pmh", "csw"])
def test_windows_behind_the_gzip_bug_verify_over_both_protocols(shared_demo, db_path, protocol):
    window = day_window(2)
    path = "/oai" if protocol == "oai-pmh" else "/csw"
    with GzipLyingProxy(shared_demo.base + path) as proxy:
        source = demo_source(shared_demo, id="pycsw", protocol=protocol, start=today().replace(day=1),
                             http=HttpSettings(max_retries=0))
        source = source.model_copy(update={"url": proxy.url()})
        report = harvest_window(source, window, db_path=db_path)
    assert report.status == ledger.VERIFIED, report.checks
    assert report.counts.received == window_stats(shared_demo, window)["live" if protocol == "csw" else "total"]
    assert any("gzip-content-length-uncompressed" in w for w in report.warnings), report.warnings
    assert len(proxy.requests) > 2
