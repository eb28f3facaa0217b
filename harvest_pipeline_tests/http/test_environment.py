"""The environment's proxies, CA bundle and netrc reach the transport, read once per origin.

requests would read them on every request; the transport reads them once per origin
(harvest_pipeline/http/environment.py). These tests send real requests over 127.0.0.1: the
recorder plays the proxy, and nothing else listens.
"""

from __future__ import annotations

import base64
import socket

import pytest
import requests

from harvest_pipeline.errors import HTTPStatusError, TransportError
from harvest_pipeline.http import environment
from harvest_pipeline.http.environment import OriginEnvironment
from harvest_pipeline.http.transport import Transport, origin
from harvest_pipeline_tests.http.test_transport import settings

PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
              "all_proxy", "no_proxy", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC")


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    for name in PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))  # never the user's own ~/.netrc
    return monkeypatch


def _dead_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_proxy_from_the_environment_carries_the_request(clean_env, rec):
    clean_env.setenv("HTTP_PROXY", rec.base)
    t = Transport(settings())
    t.get("http://harvest.invalid/oai", params={"verb": "Identify"})
    # The request line names the whole URL: the recorder was asked as a proxy.
    assert rec.log[0]["path"] == "http://harvest.invalid/oai?verb=Identify"


def test_no_proxy_sends_the_host_direct(clean_env, rec):
    clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{_dead_port()}")
    clean_env.setenv("NO_PROXY", "127.0.0.1")
    Transport(settings()).get(rec.base + "/oai")
    assert rec.log[0]["path"] == "/oai"


def test_a_session_that_does_not_trust_the_environment_is_left_so(clean_env, rec):
    clean_env.setenv("HTTP_PROXY", f"http://127.0.0.1:{_dead_port()}")
    session = requests.Session()
    session.trust_env = False
    Transport(settings(), session=session).get(rec.base + "/oai")
    assert rec.log[0]["path"] == "/oai"
    # ...while a default session does go to the (dead) proxy
    with pytest.raises(TransportError):
        Transport(settings()).get(rec.base + "/oai")


def test_the_environment_is_read_once_per_origin(clean_env, rec, monkeypatch):
    calls = []
    real = environment.get_environ_proxies
    monkeypatch.setattr(environment, "get_environ_proxies", lambda url, *a, **k: calls.append(url) or real(url, *a, **k))
    t = Transport(settings())
    for _ in range(3):
        t.get(rec.base + "/oai", params={"verb": "Identify"})
    t.get(rec.base.replace("127.0.0.1", "localhost") + "/oai")
    assert len(rec.log) == 4
    assert [origin(u) for u in calls] == [origin(rec.base), origin(rec.base.replace("127.0.0.1", "localhost"))]


def test_netrc_credentials_are_sent_and_redacted(clean_env, rec, tmp_path):
    netrc = tmp_path / "netrc"
    netrc.write_text("machine 127.0.0.1 login netrc-user password netrc-PW-4471\n")
    netrc.chmod(0o600)
    clean_env.setenv("NETRC", str(netrc))
    t = Transport(settings())
    with pytest.raises(HTTPStatusError):
        t.get(rec.base + "/status?code=404")
    sent = base64.b64decode(rec.log[0]["headers"]["Authorization"].split()[1]).decode()
    assert sent == "netrc-user:netrc-PW-4471"
    # found in the netrc file, the password is a secret like a configured one
    assert "netrc-PW-4471" not in t.redact("the server said: netrc-PW-4471")
    # configured credentials win over the netrc entry
    Transport(settings(), auth=("configured", "pw")).get(rec.base + "/oai")
    assert base64.b64decode(rec.log[1]["headers"]["Authorization"].split()[1]).decode() == "configured:pw"


def test_a_ca_bundle_from_the_environment_is_what_verifies(clean_env, tmp_path):
    bundle = tmp_path / "ca.pem"
    clean_env.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    reach = OriginEnvironment(requests.Session()).reach("https://harvest.invalid/oai")
    assert reach.verify == str(bundle) and reach.proxies is None and reach.netrc_auth is None
