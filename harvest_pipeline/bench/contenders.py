"""The contenders: each harvests the spec's window once, in the child process that measures it.

A contender has ``prepare(spec, workdir) -> state`` (imports, sessions, Dagster definitions:
not timed) and ``run(state, probe) -> dict`` (timed; returns at least ``records``). ``probe``
lets a contender mark phases (``probe.mark("merge")``) for the RSS sampler. Every import of a
third-party client happens in ``prepare``, so a contender whose library is missing or whose
API moved fails alone, as an ERROR row, while the others still run.

| name        | what it measures |
|-------------|------------------|
| fetch-only  | requests.Session GET loop, resumptionToken found by a bytes regex: the physical limit |
| sickle      | Sickle(url, iterator=OAIItemIterator).ListRecords(...), every record iterated |
| scythe      | oaipmh-scythe Scythe(url).list_records(...), every record iterated |
| client      | our OAIClient.list_records_pages(read_ahead=True) over the window, each record touched |
| client-plain | the same without read-ahead: one request per page consumed, as probes use it |
| harvest     | our harvest_window(): token loop -> staging folder -> merge, fresh DuckDB per run |
| dagster     | the same through build_definitions([source]) + execute_in_process(partition_key=...) |
| page-rows   | our client + page_rows per page, no staging (only the --big-page section runs it) |
"""

from __future__ import annotations

import inspect
import os
import re
import sys
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harvest_pipeline.bench.spec import BenchSpec

BASELINE = "fetch-only"


class Probe:
    """Phase marks for the child's RSS sampler (a no-op stand-in when nothing samples)."""

    def mark(self, phase: str) -> None:  # pragma: no cover - replaced in run_one
        pass


@dataclass(frozen=True)
class Contender:
    name: str
    label: str
    prepare: Callable[[BenchSpec, Path], object]
    run: Callable[[object, Probe], dict]
    cleanup: Callable[[object], None] = lambda state: None


# ----------------------------------------------------------------------------- fetch-only

# `<resumptionToken ...>TOKEN</resumptionToken>` or the self-closing/empty end-of-list form.
_TOKEN = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?resumptionToken\b[^>]*?(?:/>|>([^<]*)<)")
_RECORD = re.compile(rb"<(?:[A-Za-z_][\w.-]*:)?record[\s>]")
_ENTITIES = ((b"&lt;", b"<"), (b"&gt;", b">"), (b"&quot;", b'"'), (b"&apos;", b"'"), (b"&amp;", b"&"))


def _unescape(token: bytes) -> str:
    for ent, ch in _ENTITIES:
        if ent in token:
            token = token.replace(ent, ch)
    return token.decode("utf-8").strip()


def _list_params(spec: BenchSpec) -> dict:
    params = {"verb": "ListRecords", "metadataPrefix": spec.metadata_prefix, "from": spec.from_param,
              "until": spec.until_param}
    if spec.set_spec:
        params["set"] = spec.set_spec
    return params


def _fetch_prepare(spec, workdir):
    import requests

    return spec, requests.Session()


def _fetch_run(state, probe) -> dict:
    spec, session = state
    params = _list_params(spec)
    records = pages = nbytes = 0
    while True:
        resp = session.get(spec.url, params=params, timeout=120)
        resp.raise_for_status()
        body = resp.content
        pages += 1
        nbytes += len(body)
        records += len(_RECORD.findall(body))
        m = _TOKEN.search(body)
        token = _unescape(m.group(1)) if m and m.group(1) else ""
        if not token:
            break
        params = {"verb": "ListRecords", "resumptionToken": token}
    return {"records": records, "pages": pages, "mb": round(nbytes / 1e6, 1)}


def _close_session(state):
    state[1].close()


# --------------------------------------------------------------------------------- Sickle


def _sickle_prepare(spec, workdir):
    from sickle import Sickle
    from sickle.iterator import OAIItemIterator

    return spec, Sickle(spec.url, iterator=OAIItemIterator, max_retries=0, timeout=120)


def _sickle_run(state, probe) -> dict:
    from sickle.oaiexceptions import NoRecordsMatch

    spec, sickle = state
    kwargs = {k: v for k, v in _list_params(spec).items() if k != "verb"}
    records = deleted = touched = 0
    try:
        for record in sickle.ListRecords(**kwargs):
            records += 1
            touched += len(record.header.identifier)
            if record.deleted:
                deleted += 1
    except NoRecordsMatch:
        pass
    return {"records": records, "deleted": deleted}


# ---------------------------------------------------------------------------- oaipmh-scythe


def _scythe_prepare(spec, workdir):
    from oaipmh_scythe import Scythe

    return spec, Scythe(spec.url)


def _scythe_run(state, probe) -> dict:
    from oaipmh_scythe.exceptions import NoRecordsMatch

    spec, scythe = state
    records = deleted = touched = 0
    try:
        for record in scythe.list_records(from_=spec.from_param, until=spec.until_param,
                                          metadata_prefix=spec.metadata_prefix, set_=spec.set_spec):
            records += 1
            touched += len(record.header.identifier)
            if record.deleted:
                deleted += 1
    except NoRecordsMatch:
        pass
    return {"records": records, "deleted": deleted}


def _scythe_cleanup(state):
    state[1].close()


# --------------------------------------------------------------------------- our OAIClient


def _client_prepare(spec, workdir):
    from harvest_pipeline.oai.client import OAIClient

    return spec, OAIClient(spec.url)


def _client_run(state, probe, read_ahead: bool = True) -> dict:
    spec, client = state
    records = pages = deleted = chars = 0
    # read_ahead: the next request goes out as soon as a page's token is parsed (see list_records_pages).
    for page in client.list_records_pages(spec.metadata_prefix, from_=spec.from_param, until=spec.until_param,
                                          set_=spec.set_spec, **_supported(client.list_records_pages, read_ahead=read_ahead)):
        pages += 1
        for rec in page.records:
            records += 1
            chars += len(rec.identifier)
            if rec.deleted:
                deleted += 1
            elif rec.metadata_xml is not None:
                chars += len(rec.metadata_xml)
    return {"records": records, "pages": pages, "deleted": deleted}


def _client_plain_run(state, probe) -> dict:
    return _client_run(state, probe, read_ahead=False)


def _client_cleanup(state):
    close = getattr(state[1], "close", None)
    if close:
        close()


# ---------------------------------------------------------------------- our harvest_window


def _fresh_db(workdir: Path) -> Path:
    """A new catalogue path under the run's folder (nothing exists there yet)."""
    n = 0
    while (workdir / f"catalogue-{n}").exists():
        n += 1
    folder = workdir / f"catalogue-{n}"
    folder.mkdir(parents=True)
    return folder / "harvest.duckdb"


def _supported(func, **kwargs) -> dict:
    """Only the keyword arguments `func` accepts (the harvest core is being extended as we run)."""
    params = inspect.signature(func).parameters
    if any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return kwargs
    return {k: v for k, v in kwargs.items() if k in params}


# A what-if, set by the RSS section: every duckdb.connect in this child gets these settings
# (e.g. memory_limit=256MB), to show what bounding DuckDB's buffer pool would do to peak RSS.
DUCKDB_CONFIG_ENV = "HARVEST_BENCH_DUCKDB_CONFIG"


def _apply_duckdb_what_if() -> dict | None:
    raw = os.environ.get(DUCKDB_CONFIG_ENV)
    if not raw:
        return None
    import json

    import duckdb

    settings = json.loads(raw)
    if "memory_limit" in settings:
        # The limit the project sets itself (a large merge's, store/merge_memory.py) is this one too.
        os.environ["HARVEST_DUCKDB_MEMORY_LIMIT"] = str(settings["memory_limit"])
    original = duckdb.connect
    if getattr(original, "_bench_what_if", False):
        return settings

    def connect(database=":memory:", read_only=False, config=None, **kwargs):
        # The what-if wins over the project's own settings (else it measures nothing).
        return original(database, read_only=read_only, config={**(config or {}), **settings}, **kwargs)

    connect._bench_what_if = True
    duckdb.connect = connect
    return settings


def _harvest_prepare(spec, workdir):
    _apply_duckdb_what_if()
    from harvest_pipeline.harvest import harvest_window

    # spec.extra["db_path"]: a catalogue shared with other processes (the concurrency section).
    db = Path(spec.extra["db_path"]) if spec.extra.get("db_path") else _fresh_db(workdir)
    # Whatever the core derives from the catalogue path (the transport's per-host lock files in
    # <catalogue dir>/hosts, caches) must land in the scratch folder, never in the project's data/.
    os.environ["HARVEST_DUCKDB_PATH"] = str(db)
    return {"spec": spec, "source": spec.source_config(), "window": spec.window(), "db": db,
            "harvest_window": harvest_window}


def report_extra(report) -> dict:
    """The numbers of a WindowReport that the tables show (tolerant of renamed fields)."""
    counts = getattr(report, "counts", None)
    out = {"status": getattr(report, "status", "?"), "pages": getattr(report, "pages", None)}
    if counts is not None:
        for k in ("received", "stored", "created", "updated", "unchanged", "deleted"):
            if hasattr(counts, k):
                out[k] = getattr(counts, k)
    return out


@contextmanager
def _phase_marks(probe):
    """Mark the merge phase for the RSS sampler by wrapping the calls that merge staged windows:
    a window merged alone (store/merge_group.py's `merge_staging`, a large window's way) and a
    group of small ones (harvest/grouped_writes.py's `merge_staged_windows`). Only inside this
    child process; a name no longer found is said on stderr and not marked."""
    from harvest_pipeline.harvest import grouped_writes
    from harvest_pipeline.store import merge_group

    def marked(original):
        def merge_with_mark(*args, **kwargs):
            probe.mark("merge")
            try:
                return original(*args, **kwargs)
            finally:
                probe.mark("after_merge")
        return merge_with_mark

    patched = []
    for module, name in ((merge_group, "merge_staging"), (grouped_writes, "merge_staged_windows")):
        original = getattr(module, name, None)
        if original is None:
            print(f"bench: {module.__name__}.{name} not found: its merges are not marked", file=sys.stderr)
            continue
        setattr(module, name, marked(original))
        patched.append((module, name, original))
    try:
        yield
    finally:
        for module, name, original in patched:
            setattr(module, name, original)


def _harvest_run(state, probe) -> dict:
    import time

    pages = [0]
    last = [time.perf_counter()]

    def progress(event: dict) -> None:
        pages[0] += 1
        last[0] = time.perf_counter()
        probe.mark("token_loop")

    probe.mark("token_loop")
    t0 = time.perf_counter()
    with _phase_marks(probe):
        report = state["harvest_window"](
            state["source"], state["window"], db_path=state["db"],
            **_supported(state["harvest_window"], progress=progress),
        )
    t1 = time.perf_counter()
    extra = report_extra(report)
    if pages[0]:
        # After the last page: duplicate count, staging close, merge transaction, ledger row.
        extra["loop_s"] = round(last[0] - t0, 3)
        extra["post_loop_s"] = round(t1 - last[0], 3)
    extra["records"] = int(extra.get("received") or 0)
    return extra


# ------------------------------------------------------------------- one page, parse + rows


def _page_rows_prepare(spec, workdir):
    from harvest_pipeline.harvest.rows import page_rows
    from harvest_pipeline.oai.client import OAIClient

    return spec, OAIClient(spec.url), page_rows


def _page_rows_run(state, probe) -> dict:
    """What the harvest's page pipeline does with each page (fetch, parse, map, Arrow rows), no
    staging: the memory of one big page (the --big-page section)."""
    spec, client, page_rows = state
    window = spec.window()
    records = pages = nbytes = 0
    for page in client.list_records_pages(spec.metadata_prefix, from_=spec.from_param, until=spec.until_param,
                                          set_=spec.set_spec):
        rows, _ = page_rows(page, metadata_prefix=spec.metadata_prefix, window_start=window.start,
                            window_end=window.end)
        pages += 1
        records += rows.num_rows
        nbytes += page.byte_size
        page.records = []
        del rows
    return {"records": records, "pages": pages, "mb": round(nbytes / 1e6, 1)}


# ------------------------------------------------------------------------------ via Dagster


def _dagster_prepare(spec, workdir):
    import time

    t0 = time.perf_counter()
    db = _fresh_db(workdir)
    os.environ["HARVEST_DUCKDB_PATH"] = str(db)  # the DuckDB resource reads it when defs are built
    import dagster as dg

    from harvest_pipeline.defs.factory import build_definitions, window_job

    source = spec.source_config()
    defs = build_definitions([source])
    job = window_job(defs, source.id)
    home = workdir / f"dagster_home-{db.parent.name}"
    home.mkdir(parents=True, exist_ok=True)
    instance = dg.DagsterInstance.local_temp(tempdir=str(home))
    return {"spec": spec, "job": job, "instance": instance, "db": db, "setup_s": round(time.perf_counter() - t0, 3)}


def materialization_metadata(result) -> dict:
    meta: dict = {}
    for event in result.get_asset_materialization_events():
        meta = {k: getattr(v, "value", v) for k, v in event.materialization.metadata.items()}
    return meta


def _dagster_run(state, probe) -> dict:
    result = state["job"].execute_in_process(
        partition_key=state["spec"].window_key,
        instance=state["instance"],
        raise_on_error=False,
        run_config={"loggers": {"console": {"config": {"log_level": "ERROR"}}}},
    )
    if not result.success:
        err = next((e.step_failure_data.error for e in result.all_events if e.is_step_failure), None)
        raise RuntimeError("the Dagster run failed: " + (err.message.strip().splitlines()[-1] if err else "?"))
    meta = materialization_metadata(result)
    checks = {c.check_name: bool(c.passed) for c in result.get_asset_check_evaluations()}
    return {
        "records": int(meta.get("records") or 0),
        "status": meta.get("status"),
        "harvest_s": meta.get("seconds"),  # harvest_window's own clock inside the run
        "checks_passed": all(checks.values()) if checks else None,
        "setup_s": state["setup_s"],
    }


def _dagster_cleanup(state):
    state["instance"].dispose()


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender("fetch-only", "requests + bytes regex, no parse", _fetch_prepare, _fetch_run, _close_session),
        Contender("sickle", "Sickle, iterate records", _sickle_prepare, _sickle_run),
        Contender("scythe", "oaipmh-scythe, iterate records", _scythe_prepare, _scythe_run, _scythe_cleanup),
        Contender("client", "our OAIClient, pages + records", _client_prepare, _client_run, _client_cleanup),
        Contender("client-plain", "our OAIClient without read-ahead", _client_prepare, _client_plain_run,
                  _client_cleanup),
        Contender("harvest", "our harvest_window -> DuckDB", _harvest_prepare, _harvest_run),
        Contender("dagster", "harvest via Dagster materialization", _dagster_prepare, _dagster_run, _dagster_cleanup),
        Contender("page-rows", "our client + page_rows, no staging", _page_rows_prepare, _page_rows_run,
                  lambda state: state[1].close()),
    )
}
SECTION_ONLY = ("page-rows",)  # run by a section (--big-page), not in the contender table
ORDER = [name for name in CONTENDERS if name not in SECTION_ONLY]


def parse_names(text: str | None) -> list[str]:
    """`--only a,b` -> validated names in table order (aliases: oaipmh-scythe, fetch)."""
    if not text:
        return list(ORDER)
    aliases = {"oaipmh-scythe": "scythe", "fetch": "fetch-only", "fetch_only": "fetch-only", "ours": "client",
               "harvest_window": "harvest", "full": "harvest"}
    wanted = []
    for raw in text.split(","):
        name = aliases.get(raw.strip().lower(), raw.strip().lower())
        if not name:
            continue
        if name not in CONTENDERS:
            raise ValueError(f"unknown contender {raw!r}; known: {', '.join(ORDER)}")
        wanted.append(name)
    return [n for n in ORDER if n in wanted]
