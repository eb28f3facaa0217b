"""Fixtures shared by the transport's tests."""

from __future__ import annotations

import threading

import pytest

from harvest_pipeline_tests.http.recorder import Recorder


@pytest.fixture
def rec():
    srv = Recorder()
    t = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()
