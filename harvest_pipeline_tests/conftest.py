"""Shared fixtures: a real demo provider process on 127.0.0.1 and a fresh catalogue per test."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harvest_pipeline.demo.process import start_demo_provider
from harvest_pipeline.harvest import Window
from harvest_pipeline.sources.registry import SourceConfig

_test_day: datetime | None = None  # set for each test by the autouse fixture `test_day`


def utc_midnight() -> datetime:
    return datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)


def today() -> datetime:
    """Midnight UTC of the running test's day (read when the test starts, so a run that crosses
    midnight moves with the clock the harvester reads); on the shared provider, its frozen day."""
    return _test_day or utc_midnight()


def demo_options(**overrides) -> dict:
    """A demo provider's options, its clock frozen at today's midnight: every closed daily window
    is final while the test runs."""
    return {"page_size": 25, "days": 8, "records_per_day": 60, "now": today(), **overrides}


def day_window(days_ago: int, before: datetime | None = None) -> Window:
    """The daily window `days_ago` days before `before` (default: today())."""
    start = (before or today()) - timedelta(days=days_ago)
    return Window(start, start + timedelta(days=1), start.strftime("%Y-%m-%d"))


def records_table(db_path) -> list[tuple]:
    """The records table without the columns that record when it was written (for equality)."""
    from harvest_pipeline.store import connect

    with connect(db_path) as con:
        return con.execute(
            "SELECT * EXCLUDE (written_at, first_seen_at, written_by_run) FROM records ORDER BY source_id, identifier"
        ).fetchall()


def window_stats(provider, window: Window) -> dict:
    return provider.stats(from_=window.start, until=window.end - timedelta(seconds=1))


@pytest.fixture(scope="session")
def shared_demo():
    """A provider that tests must not mutate (read-only harvesting)."""
    options = demo_options(now=utc_midnight())
    with start_demo_provider(**options) as provider:
        provider.today = options["now"]
        yield provider


@pytest.fixture(scope="session")
def _tunable_provider():
    options = demo_options(now=utc_midnight())
    with start_demo_provider(**options) as provider:
        provider.today = options["now"]
        provider.pristine = provider.options()
        yield provider


@pytest.fixture
def tunable_demo(_tunable_provider):
    """A shared provider whose options (fault modes, deletion policy, lies) a test may change; they
    are put back, and the fault counters restarted, around each test. Not for tests that touch or
    delete records: those change the corpus and need a provider of their own (`demo`)."""
    _tunable_provider.set_options(**_tunable_provider.pristine)
    yield _tunable_provider
    _tunable_provider.set_options(**_tunable_provider.pristine)


@pytest.fixture(autouse=True)
def test_day(request):
    """Fix today() for this test: now, or the day of the shared provider the test uses."""
    global _test_day
    shared = next((f for f in ("shared_demo", "_tunable_provider") if f in request.fixturenames), None)
    _test_day = request.getfixturevalue(shared).today if shared else utc_midnight()
    yield _test_day
    _test_day = None


@pytest.fixture
def demo():
    """A provider of the test's own, free to touch, delete and lie."""
    with start_demo_provider(**demo_options()) as provider:
        yield provider


@pytest.fixture
def db_path(tmp_path, monkeypatch) -> Path:
    path = tmp_path / "data" / "harvest.duckdb"
    monkeypatch.setenv("HARVEST_DUCKDB_PATH", str(path))
    return path


def demo_source(provider, **kw) -> SourceConfig:
    return SourceConfig(id=kw.pop("id", "demo"), url=provider.url, **kw)


@pytest.fixture
def sources_file(tmp_path, monkeypatch):
    """Write a sources YAML for the given providers and point HARVEST_SOURCES_FILE at it."""

    def write(**providers) -> Path:
        lines = ["sources:"]
        for source_id, provider in providers.items():
            lines += [f"  - id: {source_id}", f"    url: {provider.url}", "    window: day"]
        path = tmp_path / "sources.yaml"
        path.write_text("\n".join(lines) + "\n")
        monkeypatch.setenv("HARVEST_SOURCES_FILE", str(path))
        return path

    return write


def learn_facts(*sources) -> None:
    """Store the servers' facts, as `harvest-pipeline facts` does: definitions read them at load."""
    from harvest_pipeline.harvest.server_facts import refresh_facts
    from harvest_pipeline.store import default_db_path

    for source in sources:
        refresh_facts(source, default_db_path(), learned_by="test")
