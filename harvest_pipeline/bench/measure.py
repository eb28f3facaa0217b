"""Running contenders in child processes and summarizing repeated runs (median / min / max).

Each measured run is ``python -m harvest_pipeline.bench.run_one NAME ...`` in a fresh process,
so its peak RSS (VmHWM / ``ru_maxrss``) belongs to that contender alone and no contender warms another's
caches. Runs are interleaved (run 1 of every contender, then run 2 ...), which spreads a noisy
neighbour's load over all contenders instead of penalizing one.
"""

from __future__ import annotations

import json
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harvest_pipeline.bench.run_one import PHASE_FILE, RESULT_PREFIX
from harvest_pipeline.bench.spec import BenchSpec, child_env, provider_trouble


@dataclass
class Sample:
    """One child run's JSON result (see run_one)."""

    name: str
    data: dict

    @property
    def error(self) -> str | None:
        return self.data.get("error")

    @property
    def records(self) -> int:
        return int(self.data.get("records") or 0)

    @property
    def seconds(self) -> float:
        return float(self.data.get("seconds") or 0.0)

    @property
    def rate(self) -> float:
        return self.records / self.seconds if self.seconds > 0 else 0.0


@dataclass
class Stats:
    """median / min / max of one quantity over runs."""

    median: float
    min: float
    max: float
    n: int

    @classmethod
    def of(cls, values: Iterable[float]) -> Stats | None:
        v = [float(x) for x in values]
        if not v:
            return None
        return cls(statistics.median(v), min(v), max(v), len(v))

    def as_dict(self) -> dict:
        return {"median": self.median, "min": self.min, "max": self.max, "n": self.n}


@dataclass
class Summary:
    name: str
    samples: list[Sample] = field(default_factory=list)

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if not s.error]

    @property
    def errors(self) -> list[str]:
        return [s.error for s in self.samples if s.error]

    @property
    def rate(self) -> Stats | None:
        return Stats.of(s.rate for s in self.ok)

    @property
    def seconds(self) -> Stats | None:
        return Stats.of(s.seconds for s in self.ok)

    @property
    def rss_peak_mb(self) -> float | None:
        vals = [s.data.get("rss_peak_mb") for s in self.samples if s.data.get("rss_peak_mb")]
        return max(vals) if vals else None

    @property
    def records(self) -> int | None:
        vals = {s.records for s in self.ok}
        return vals.pop() if len(vals) == 1 else (max(vals) if vals else None)

    def extra_median(self, key: str) -> float | None:
        vals = [s.data[key] for s in self.ok if isinstance(s.data.get(key), (int, float))]
        return statistics.median(vals) if vals else None

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "rate": self.rate.as_dict() if self.rate else None,
            "seconds": self.seconds.as_dict() if self.seconds else None,
            "rss_peak_mb": self.rss_peak_mb,
            "records": self.records,
            "errors": self.errors,
            "samples": [s.data for s in self.samples],
        }


def spawn(name: str, spec_file: Path, workdir: Path, *, start_at: float | None = None,
          env: dict | None = None) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "harvest_pipeline.bench.run_one", name, "--spec", str(spec_file),
           "--workdir", str(workdir)]
    if start_at is not None:
        cmd += ["--start-at", repr(start_at)]
    workdir.mkdir(parents=True, exist_ok=True)
    with open(workdir / "stderr.log", "wb") as stderr:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, stdin=subprocess.DEVNULL,
                                env=child_env(env), text=True, encoding="utf-8")


def _watch_rss(proc: subprocess.Popen, cap_mb: float, timeout: float) -> tuple[str | None, float]:
    """Poll the child's RSS until it exits; kill it above `cap_mb` (protects a shared machine).
    Returns (why it was killed or None, highest RSS seen in MB)."""
    try:
        import psutil

        ps = psutil.Process(proc.pid)
    except Exception:  # noqa: BLE001 - no psutil, or the child is already gone: no guard
        return None, 0.0
    deadline = time.monotonic() + timeout
    seen = 0.0
    while proc.poll() is None:
        try:
            seen = max(seen, ps.memory_info().rss / (1 << 20))
        except Exception:  # noqa: BLE001 - exited between poll() and memory_info()
            break
        if seen > cap_mb:
            proc.kill()
            return f"killed above the {cap_mb:,.0f} MB --rss-cap-mb", seen
        if time.monotonic() > deadline:
            proc.kill()
            return f"timed out after {timeout:.0f} s", seen
        time.sleep(0.25)
    return None, seen


def collect(name: str, proc: subprocess.Popen, workdir: Path, timeout: float,
            rss_cap_mb: float | None = None) -> Sample:
    """Wait for a child and parse its BENCH_RESULT line (a timeout or crash becomes an error)."""
    if rss_cap_mb:
        # The child writes one short result line, so a full stdout pipe cannot block it meanwhile.
        t = time.perf_counter()
        killed, seen = _watch_rss(proc, rss_cap_mb, timeout)
        if killed:
            proc.communicate()
            try:
                phase = (workdir / PHASE_FILE).read_text().strip()
            except OSError:
                phase = "?"
            return Sample(name, {"name": name, "error": f"{killed} (phase {phase}, after {time.perf_counter() - t:.0f} s)",
                                 "rss_peak_mb": round(seen, 1), "killed": True, "killed_in_phase": phase})
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        stdout, _ = proc.communicate()
        return Sample(name, {"name": name, "error": f"timed out after {timeout:.0f} s"})
    for line in reversed((stdout or "").splitlines()):
        if line.startswith(RESULT_PREFIX):
            return Sample(name, json.loads(line[len(RESULT_PREFIX):]))
    tail = ""
    try:
        lines = [s for s in (workdir / "stderr.log").read_text(errors="replace").splitlines() if s.strip()]
        tail = lines[-1] if lines else ""
    except OSError:
        pass
    return Sample(name, {"name": name, "error": f"child exited {proc.returncode} without a result: {tail}"})


def run_child(name: str, spec_file: Path, workdir: Path, *, timeout: float = 3600,
              env: dict | None = None, rss_cap_mb: float | None = None) -> Sample:
    return collect(name, spawn(name, spec_file, workdir, env=env), workdir, timeout, rss_cap_mb)


def check_count(sample: Sample, spec: BenchSpec) -> None:
    """A run that did not see the whole window is not a valid measurement."""
    if sample.error or spec.expected < 0:
        return
    if sample.records != spec.expected:
        sample.data["error"] = f"saw {sample.records} records, the window holds {spec.expected}"


def run_contenders(
    names: list[str],
    spec: BenchSpec,
    spec_file: Path,
    workdir: Path,
    *,
    runs: int,
    warmup: int = 0,
    timeout: float = 3600,
    log: Callable[[str], None] = lambda s: None,
    keep: bool = False,
    provider=None,
) -> dict[str, Summary]:
    """`runs` interleaved rounds over `names`; warm-up rounds (fetch-only) are not counted."""
    for w in range(warmup):
        # Warms the provider (its page cache, the OS socket paths) identically for everyone.
        s = run_child("fetch-only", spec_file, workdir / f"warmup-{w}", timeout=timeout)
        log(f"  warm-up {w + 1}/{warmup}: {s.rate:,.0f} records/s" if not s.error else f"  warm-up: {s.error}")
    out = {n: Summary(n) for n in names}
    for r in range(runs):
        for name in names:
            t = time.perf_counter()
            run_dir = workdir / f"run-{r}-{name}"
            sample = run_child(name, spec_file, run_dir, timeout=timeout)
            check_count(sample, spec)
            if not keep and not sample.error:
                shutil.rmtree(run_dir, ignore_errors=True)  # catalogues of big windows add up
            trouble = provider_trouble(provider) if provider is not None else None
            if trouble:
                raise RuntimeError(f"{trouble}; run {r + 1} of {name}: {sample.error or 'ok'}")
            out[name].samples.append(sample)
            if sample.error:
                log(f"  run {r + 1}/{runs} {name:<11} ERROR {sample.error}")
            else:
                log(f"  run {r + 1}/{runs} {name:<11} {sample.records:>9,} records in {sample.seconds:7.2f} s = "
                    f"{sample.rate:>9,.0f} rec/s, peak RSS {sample.data.get('rss_peak_mb')} MB "
                    f"(child {time.perf_counter() - t:.1f} s)")
    return out
