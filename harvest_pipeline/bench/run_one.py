"""One measured run of one contender, in its own process (so its peak RSS is its own).

    python -m harvest_pipeline.bench.run_one NAME --spec SPEC.json --workdir DIR [--start-at EPOCH]

Prints one line ``BENCH_RESULT {json}`` on stdout (also on failure, with ``error``):
records, seconds (the timed ``run`` only), the process's peak RSS (``rss_peak_mb``: VmHWM on Linux,
i.e. ``ru_maxrss`` without the parent's pre-exec high-water mark; the whole process: interpreter,
imports, the run), the RSS after ``prepare`` (``rss_base_mb``)
and, from a sampling thread, the peak per phase the contender marked (``rss_phases_mb``) and the
split of the highest sample (``rss_split_mb``: anonymous memory, which is this process's own, and
file-backed pages, mostly the shared libraries' code, which processes share).
``--start-at`` waits until that wall-clock time after ``prepare``: the concurrency section starts
N harvests at the same instant this way.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

RESULT_PREFIX = "BENCH_RESULT "


def rss_split_mb() -> dict[str, float]:
    """This process's resident memory now, split: RssAnon and RssFile (+RssShmem) of /proc, in MB."""
    out: dict[str, float] = {}
    try:
        with open("/proc/self/status") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key in ("RssAnon", "RssFile", "RssShmem"):
                    out[key] = int(value.split()[0]) / 1024
    except (OSError, ValueError):
        return {}
    if not out:
        return {}
    return {"anon": round(out.get("RssAnon", 0), 1), "file": round(out.get("RssFile", 0) + out.get("RssShmem", 0), 1)}


def current_rss_bytes() -> int:
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except Exception:  # noqa: BLE001 - psutil is optional (the `bench` extra)
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
        except OSError:
            return 0


PROFILE_ENV = "HARVEST_BENCH_PROFILE"  # write a profile of the timed part to this path
PROFILER_ENV = "HARVEST_BENCH_PROFILER"  # cprofile (default) | pyinstrument


@contextmanager
def _profiled():
    path = os.environ.get(PROFILE_ENV)
    if not path:
        yield
        return
    if os.environ.get(PROFILER_ENV, "cprofile") == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.001)
        profiler.start()
        try:
            yield
        finally:
            profiler.stop()
            Path(path).write_text(profiler.output_text(unicode=False, color=False, show_all=False))
        return
    import cProfile
    import pstats

    # cProfile sees one thread; the harvest may fetch/parse in a worker thread (prefetch), so every
    # thread started meanwhile gets its own profiler, merged into one file at the end.
    others: list = []

    def start_in_thread(frame, event, arg):
        prof = cProfile.Profile()
        others.append(prof)
        prof.enable()  # replaces this hook for the new thread

    profiler = cProfile.Profile()
    threading.setprofile(start_in_thread)
    profiler.enable()
    try:
        yield
    finally:
        profiler.disable()
        threading.setprofile(None)
        stats = pstats.Stats(profiler)
        for prof in others:  # their threads have ended (or will record nothing more of interest)
            try:
                stats.add(prof)
            except (TypeError, ValueError):  # a thread that saw no calls
                pass
        stats.dump_stats(path)
        Path(str(path) + ".threads").write_text(str(1 + len(others)))


def _cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def peak_rss_mb() -> float:
    """This process's peak RSS since its exec.

    Linux: VmHWM of /proc/self/status. Not ru_maxrss there: the kernel carries the pre-exec
    high-water mark into ru_maxrss, so a child forked (or vforked) from a big parent would report
    the parent's size. Elsewhere: ru_maxrss (kilobytes; bytes on macOS).
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1 << 20) if sys.platform == "darwin" else peak / 1024, 1)


class Sampler:
    """Samples this process's RSS every `interval` s and keeps the peak of each marked phase."""

    def __init__(self, interval: float = 0.05, phase_file: Path | None = None):
        self.interval = interval
        self.phase_file = phase_file  # the parent reads it if it has to kill this process
        self.phase = "prepare"
        self.peaks: dict[str, int] = {}
        self.highest, self.split_at_highest = 0, {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="bench-rss-sampler", daemon=True)

    def mark(self, phase: str) -> None:
        self.sample()
        if phase != self.phase and self.phase_file is not None:
            try:
                self.phase_file.write_text(phase)
            except OSError:
                pass
        self.phase = phase

    def sample(self) -> None:
        rss = current_rss_bytes()
        if rss > self.peaks.get(self.phase, 0):
            self.peaks[self.phase] = rss
        if rss > self.highest:
            self.highest, self.split_at_highest = rss, rss_split_mb()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        self._stop.set()
        self._thread.join(2)
        self.sample()
        return {k: round(v / (1 << 20), 1) for k, v in self.peaks.items()}


PHASE_FILE = "phase.txt"


def measure(name: str, spec, workdir: Path, *, start_at: float | None = None, interval: float = 0.05) -> dict:
    """Prepare, (wait), run and describe one contender; never raises."""
    from harvest_pipeline.bench.contenders import CONTENDERS

    sampler = Sampler(interval, workdir / PHASE_FILE).start()
    out: dict = {"name": name, "pid": os.getpid()}
    state = None
    contender = CONTENDERS.get(name)
    try:
        if contender is None:
            raise KeyError(f"unknown contender {name!r}")
        t = time.perf_counter()
        state = contender.prepare(spec, workdir)
        out["prepare_s"] = round(time.perf_counter() - t, 3)
        out["rss_base_mb"] = round(current_rss_bytes() / (1 << 20), 1)
        if start_at is not None:
            late = time.time() - start_at
            out["late_s"] = round(max(late, 0.0), 3)
            if late < 0:
                time.sleep(-late)
        sampler.mark("run")
        out["started_at"] = time.time()
        cpu0 = _cpu_seconds()
        t = time.perf_counter()
        with _profiled():
            result = contender.run(state, sampler)
        out["seconds"] = time.perf_counter() - t
        out["cpu_s"] = round(_cpu_seconds() - cpu0, 3)  # this process's CPU in the timed part
        out["ended_at"] = time.time()
        sampler.mark("done")
        out.update(result)
    except BaseException as exc:  # noqa: BLE001 - the parent shows it as an ERROR row
        traceback.print_exc(file=sys.stderr)
        lines = [s for s in str(exc).strip().splitlines() if s.strip()]
        out["error"] = f"{type(exc).__name__}: {lines[-1] if lines else ''}".strip().rstrip(":")
    finally:
        if state is not None and contender is not None:
            try:
                contender.cleanup(state)
            except Exception:  # noqa: BLE001
                traceback.print_exc(file=sys.stderr)
    out["rss_phases_mb"] = sampler.stop()
    out["rss_split_mb"] = sampler.split_at_highest
    out["rss_peak_mb"] = peak_rss_mb()
    return out


def main(argv: list[str] | None = None) -> int:
    from harvest_pipeline.bench.spec import BenchSpec

    p = argparse.ArgumentParser(prog="python -m harvest_pipeline.bench.run_one")
    p.add_argument("name")
    p.add_argument("--spec", required=True, help="the BenchSpec JSON file")
    p.add_argument("--workdir", required=True, help="this run's scratch folder (created)")
    p.add_argument("--start-at", type=float, default=None, help="start the timed part at this epoch time")
    p.add_argument("--sample-interval", type=float, default=0.05)
    args = p.parse_args(argv)
    spec = BenchSpec.read(args.spec)
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out = measure(args.name, spec, workdir, start_at=args.start_at, interval=args.sample_interval)
    sys.stdout.write(RESULT_PREFIX + json.dumps(out, default=str) + "\n")
    sys.stdout.flush()
    return 1 if "error" in out else 0


if __name__ == "__main__":
    sys.exit(main())
