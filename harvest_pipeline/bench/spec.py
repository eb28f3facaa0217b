"""What every contender harvests: one demo provider, one closed window, as a JSON-able spec.

The parent process starts the demo provider once per corpus and writes a :class:`BenchSpec`
to a file; each measured run is a child process that reads it (see ``run_one``), so every
contender of one invocation talks to the same endpoint about the same window.

The window is one day ``D`` (yesterday, UTC, by default) holding ``records`` records. The
provider's clock is frozen at ``D + 1 day`` 00:00 UTC, so the window is closed: nothing in it
changes while the contenders take turns, and Dagster already lists ``D`` as a partition.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

SOURCE_ID = "bench"
DEFAULT_PREFIX = "oai_dc"
# Long enough for a 1M-record window on a slow machine: an expiring token would measure restarts.
TOKEN_TTL_SECONDS = 7 * 86400


def default_day() -> date:
    """Yesterday (UTC): closed, and already a partition of a daily asset that starts on it."""
    return datetime.now(UTC).date() - timedelta(days=1)


def midnight(d: date) -> datetime:
    return datetime(d.year, d.month, d.day, tzinfo=UTC)


@dataclass
class BenchSpec:
    """Everything a child process needs to harvest the window (JSON round-trip safe)."""

    url: str
    window_start: str  # ISO, UTC, inclusive
    window_end: str  # ISO, UTC, exclusive
    window_key: str  # the Dagster partition key (YYYY-MM-DD for day windows)
    from_param: str  # the OAI-PMH `from` the harvester would send
    until_param: str  # the OAI-PMH `until`
    expected: int  # records the provider says the window holds (its /stats total)
    page_size: int
    workdir: str  # children create their run folders below it
    metadata_prefix: str = DEFAULT_PREFIX
    set_spec: str | None = None
    source_id: str = SOURCE_ID
    extra: dict = field(default_factory=dict)

    # -- helpers used by the children ---------------------------------------------------

    @property
    def start(self) -> datetime:
        return datetime.fromisoformat(self.window_start)

    @property
    def end(self) -> datetime:
        return datetime.fromisoformat(self.window_end)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> BenchSpec:
        return cls(**json.loads(text))

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_json(), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: str | Path) -> BenchSpec:
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def source_config(self, **overrides):
        """The project's SourceConfig for this endpoint (only fields every version has)."""
        from harvest_pipeline.sources.registry import SourceConfig

        kw = dict(id=self.source_id, url=self.url, metadata_prefix=self.metadata_prefix, window="day",
                  start=self.start)
        if self.set_spec:
            kw["set"] = self.set_spec
        kw.update(overrides)
        return SourceConfig(**kw)

    def window(self):
        from harvest_pipeline.harvest import Window

        return Window(self.start, self.end, self.window_key)


def oai_bounds(start: datetime, end: datetime) -> tuple[str, str]:
    """from/until for [start, end) at seconds granularity (the demo's), via the project's rule."""
    try:
        from harvest_pipeline.dates import window_to_oai_bounds

        b = window_to_oai_bounds(start, end, "YYYY-MM-DDThh:mm:ssZ")
        return b[0], b[1]
    except Exception:  # noqa: BLE001 - the rule moved or changed: fall back to the protocol's own
        last = end - timedelta(seconds=1)
        return start.strftime("%Y-%m-%dT%H:%M:%SZ"), last.strftime("%Y-%m-%dT%H:%M:%SZ")


@contextmanager
def bench_provider(
    *,
    records_per_day: int,
    page_size: int,
    days: int = 1,
    day: date | None = None,
    host: str | None = None,
    workdir: str | Path,
    startup_timeout: float = 600.0,
) -> Iterator[tuple[object, BenchSpec]]:
    """Start a demo provider whose last corpus day is `day` (default yesterday), clock frozen at
    the next midnight; yield (provider, spec of the window = the last day)."""
    from harvest_pipeline.demo.process import start_demo_provider

    day = day or default_day()
    start = midnight(day)
    end = start + timedelta(days=1)
    options = dict(page_size=page_size, days=days, records_per_day=records_per_day, end_day=day, now=end,
                   token_ttl=TOKEN_TTL_SECONDS)
    if host:
        options["host"] = host
    provider = start_demo_provider(startup_timeout=startup_timeout, **options)
    try:
        from_param, until_param = oai_bounds(start, end)
        try:
            expected = int(provider.stats(from_=start, until=end - timedelta(seconds=1))["total"])
        except Exception:  # noqa: BLE001 - /stats is a demo extra; the count check is then skipped
            expected = -1
        spec = BenchSpec(
            url=provider.url, window_start=start.isoformat(), window_end=end.isoformat(),
            window_key=day.isoformat(), from_param=from_param, until_param=until_param, expected=expected,
            page_size=page_size, workdir=str(workdir),
        )
        yield provider, spec
    finally:
        provider.stop()


def provider_trouble(provider) -> str | None:
    """Why the demo provider is gone (something outside the bench may have killed it), or None."""
    proc = getattr(provider, "proc", None)
    if proc is None or proc.poll() is None:
        return None
    return f"the demo provider exited with code {proc.returncode} (killed from outside?)"


def child_env(extra: dict | None = None) -> dict:
    """The environment for child processes: the package importable, Python unbuffered."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONUNBUFFERED"] = "1"
    env.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    if extra:
        env.update({k: str(v) for k, v in extra.items()})
    return env


def open_instance(home: Path):
    """The Dagster instance of a bench's scratch home. The project's dagster.yaml names its event log
    folder by DAGSTER_HOME, so this process points DAGSTER_HOME there too."""
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.from_config(str(home))
