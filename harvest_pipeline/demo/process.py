"""Run the demo provider as a real subprocess (tests, CLI `dev`, benchmarks).

    with start_demo_provider(page_size=5, now="2026-10-10T12:00:00Z") as p:
        p.url        # http://127.0.0.1:PORT/oai
        p.stats(set="physics"); p.touch(identifier); p.set_options(token_ttl=1)

A subprocess rather than a thread: the harvester under test then talks real HTTP to a
server that shares no interpreter state (GIL, locks) with it.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import subprocess
import sys
import tempfile
import threading
import urllib.error
import urllib.parse
import urllib.request
from datetime import date, datetime, timezone
from pathlib import Path

_READY = re.compile(r"demo provider listening on (http://\S+/oai)")
_LIVE: set["DemoProcess"] = set()


def _flag_value(value) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=timezone.utc)
        return value.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _fault_value(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def _cli_args(options: dict) -> list[str]:
    """Keyword options -> CLI flags, checked against the CLI parser so typos fail here.

    Fault modes: `fault={"fail_every": 3}` (or a list of "key=value"), `faults="all-recoverable"`
    (a preset), or any fault field directly (`fail_every=3`); each becomes `--fault key=value`."""
    from .__main__ import build_parser  # light import: argparse + corpus/server modules
    from .faults import fault_field_names

    known = {a.dest for a in build_parser()._actions}
    fault_keys = set(fault_field_names())
    out: list[str] = []
    for key, value in options.items():
        if key == "fault":
            items = value.items() if isinstance(value, dict) else (str(v).split("=", 1) for v in value or ())
            for k, v in items:
                out.extend(["--fault", f"{k}={_fault_value(v)}"])
            continue
        if key in fault_keys:
            out.extend(["--fault", f"{key}={_fault_value(value)}"])
            continue
        if key not in known or key == "help":
            raise TypeError(f"unknown demo provider option {key!r}")
        if value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        out.extend([flag] if value is True else [flag, _flag_value(value)])
    return out


class DemoProcess:
    """A running `python -m harvest_pipeline.demo` child process and small admin helpers."""

    def __init__(self, args: list[str], startup_timeout: float = 30.0):
        self.args = list(args)
        self.startup_timeout = startup_timeout
        self.url: str | None = None
        self.proc: subprocess.Popen | None = None
        self.banner: str | None = None
        self._stderr = None

    # -- lifecycle -----------------------------------------------------------------------

    def start(self) -> "DemoProcess":
        cmd = [sys.executable, "-m", "harvest_pipeline.demo", *self.args]
        env = dict(os.environ)
        # Make the package importable in the child even without an installed distribution.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        self._stderr = tempfile.TemporaryFile()  # a file, not a pipe: a chatty child can never block
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self._stderr, stdin=subprocess.DEVNULL,
                                     env=env, text=True, encoding="utf-8")
        _LIVE.add(self)
        lines: queue.Queue = queue.Queue()

        def _read(stream=self.proc.stdout):
            # Hand over the first line, then keep draining so the child never blocks on stdout.
            for line in stream:
                lines.put(line)
            lines.put(None)

        threading.Thread(target=_read, name="demo-provider-stdout", daemon=True).start()
        try:
            line = lines.get(timeout=self.startup_timeout)
        except queue.Empty:
            line = ""
            reason = f"no ready line within {self.startup_timeout:.0f} s"
        else:
            reason = "it exited" if line is None else f"unexpected first line {line!r}"
        m = _READY.search(line or "")
        if not m:
            self.stop()
            raise RuntimeError(f"demo provider did not start ({reason}): {' '.join(cmd)}\n"
                               f"stderr:\n{self.stderr_text()}")
        self.banner = line.strip()
        self.url = m.group(1)
        return self

    def stop(self) -> int | None:
        """SIGTERM, wait up to 5 s, then SIGKILL. Returns the exit code."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if proc.stdout:
            proc.stdout.close()
        _LIVE.discard(self)
        return proc.returncode

    def stderr_text(self) -> str:
        if self._stderr is None:
            return ""
        self._stderr.seek(0)
        return self._stderr.read().decode("utf-8", "replace")

    def __enter__(self) -> "DemoProcess":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def base(self) -> str:
        """http://127.0.0.1:PORT (no path)."""
        return self.url[: -len("/oai")] if self.url else ""

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.url).port

    # -- HTTP helpers --------------------------------------------------------------------

    def _call(self, method: str, path: str, data: dict | None = None, query: dict | None = None):
        url = self.base + path + ("?" + urllib.parse.urlencode(query) if query else "")
        body = json.dumps(data).encode() if data is not None else None
        req = urllib.request.Request(url, data=body, method=method,
                                     headers={"Content-Type": "application/json"} if body else {})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as e:
            if e.code == 404 and path.startswith("/admin/"):
                raise KeyError(data.get("identifier") if data else path) from None
            raise RuntimeError(f"{method} {url} -> {e.code}: {e.read().decode('utf-8', 'replace')}") from None

    def oai(self, params: dict | None = None, method: str = "GET", **kw) -> bytes:
        """Raw OAI-PMH response body. `from_` is accepted for `from`; `params` may be a list of pairs."""
        items = list(params.items()) if isinstance(params, dict) else list(params or [])
        items += [("from" if k == "from_" else k, v) for k, v in kw.items()]
        query = urllib.parse.urlencode(items)
        if method == "POST":
            req = urllib.request.Request(self.url, data=query.encode(), method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded"})
        else:
            req = urllib.request.Request(self.url + ("?" + query if query else ""))
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.read()

    def stats(self, **q) -> dict:
        """GET /stats; keys from/from_, until, set/set_spec."""
        mapping = {"from_": "from", "set_spec": "set"}
        return self._call("GET", "/stats", query={mapping.get(k, k): _flag_value(v)
                                                  for k, v in q.items() if v is not None})

    def touch(self, identifier: str, at=None) -> dict:
        """New version now (or at `at`); KeyError if unknown."""
        return self._call("POST", "/admin/touch", {"identifier": identifier, **({"at": _flag_value(at)} if at else {})})

    def delete(self, identifier: str, at=None) -> dict:
        """Delete now (or at `at`); KeyError if unknown."""
        return self._call("POST", "/admin/delete", {"identifier": identifier, **({"at": _flag_value(at)} if at else {})})

    def set_options(self, **kw) -> dict:
        """Update ServerOptions at runtime (and `now=` to move a frozen clock forward)."""
        return self._call("POST", "/admin/options", {k: _flag_value(v) if isinstance(v, (date, datetime)) else v
                                                     for k, v in kw.items()})

    def options(self) -> dict:
        return self._call("GET", "/admin/options")

    def faults(self) -> dict:
        """GET /admin/faults: the fault request counter and the active fault modes."""
        return self._call("GET", "/admin/faults")


def start_demo_provider(*, startup_timeout: float = 30.0, **options) -> DemoProcess:
    """Spawn the provider on a free 127.0.0.1 port and wait for it (usable as a context manager).

    Options are the CLI flags with underscores: page_size, token_ttl, days, records_per_day,
    end_day, seed, granularity, now (datetime or ISO), complete_list_size_bias, verbose, host, port;
    fault modes as `fault={...}`, `faults="all-recoverable"` or directly (`fail_every=3`), see faults.py.
    """
    options.setdefault("port", 0)
    return DemoProcess(_cli_args(options), startup_timeout=startup_timeout).start()


@atexit.register
def _reap() -> None:
    # A test that forgot stop() must not leave servers behind.
    for p in list(_LIVE):
        p.stop()
