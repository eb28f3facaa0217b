"""Shared fixtures: a real demo provider process on 127.0.0.1 and a fresh catalogue per test."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from harvest_pipeline.demo.process import start_demo_provider
from harvest_pipeline.harvest import Window
from harvest_pipeline.sources.registry import SourceConfig

# The demo clock is frozen at today's midnight: every closed daily window is final for the test run.
TODAY = datetime.now(timezone.utc).replace(hour=0, minute=0, second=0, microsecond=0)
DEMO = dict(page_size=25, days=8, records_per_day=60, now=TODAY)


def day_window(days_ago: int) -> Window:
    start = TODAY - timedelta(days=days_ago)
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
    with start_demo_provider(**DEMO) as provider:
        yield provider


@pytest.fixture
def demo():
    """A provider of the test's own, free to touch, delete and lie."""
    with start_demo_provider(**DEMO) as provider:
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
