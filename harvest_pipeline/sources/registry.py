"""Load and validate the sources YAML (`HARVEST_SOURCES_FILE`, default `data/sources.yaml`).

Bad config fails at load time with a message naming the source and the field, because a typo
found at 3 a.m. by a sensor is much more expensive than one found when the UI loads.
"""

from __future__ import annotations

import os
import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal
from urllib.parse import parse_qsl, urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from harvest_pipeline.errors import ConfigError
from harvest_pipeline.http.redaction import register_secrets, secret_query_values

DEFAULT_SOURCES_FILE = "data/sources.yaml"
SOURCE_ID_RE = re.compile(r"[a-z0-9_]+")  # always fullmatch: `$` would let a trailing newline through
# Ids become file and directory names, asset keys and pool names; 64 keeps every derived name
# (e.g. `harvest_<id>_watermark`, `<id>.parquet`) far below file-name limits.
SOURCE_ID_MAX_LENGTH = 64
_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}")


def sources_file_path() -> Path:
    return Path(os.environ.get("HARVEST_SOURCES_FILE") or DEFAULT_SOURCES_FILE)


class AuthConfig(BaseModel):
    """HTTP basic auth; both values are *names of env vars*, never the secrets themselves."""

    model_config = ConfigDict(extra="forbid")
    username_env: str
    password_env: str


class HttpSettings(BaseModel):
    """Transport limits and politeness towards the partner server (per source)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    # Silence limit: connecting, and every wait for the next bytes.
    timeout_seconds: float = Field(default=60.0, gt=0)
    # Wall-clock limit of one attempt, headers and body included (None: 10 x timeout_seconds).
    request_deadline_seconds: float | None = Field(default=None, gt=0)
    max_retries: int = Field(default=5, ge=0)
    backoff_base_seconds: float = Field(default=1.0, ge=0)
    backoff_max_seconds: float = Field(default=60.0, ge=0)
    # A Retry-After longer than this ends the window as deferred instead of blocking a worker.
    retry_after_cap_seconds: float = Field(default=300.0, ge=0)
    # Politeness per host, shared by every process harvesting that host.
    min_request_interval_seconds: float = Field(default=0.0, ge=0)
    max_concurrent_requests: int = Field(default=2, ge=1)
    max_response_mb: float = Field(default=256.0, gt=0)
    # Redirects to another origin (scheme, host, port) are refused unless allowed; even then the
    # source's secrets (headers_from_env, auth, secret query parameters) never go along.
    allow_cross_origin_redirects: bool = False


class TraversalLimits(BaseModel):
    """The budget of one traversal: a window, a full harvest or a reconciliation listing.

    With an announced size (completeListSize, numberOfRecordsMatched) the page and record budgets
    follow it (``size_slack`` times the size, pages by the first page's size); the absolute caps
    hold whatever the server announced.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)
    max_seconds: float = Field(default=6 * 3600.0, gt=0)
    max_pages: int = Field(default=100_000, ge=1)
    max_records: int = Field(default=10_000_000, ge=1)
    size_slack: float = Field(default=2.0, ge=1)
    max_token_bytes: int = Field(default=4096, ge=16)


class ReconcileSettings(BaseModel):
    """Deletion by absence, for servers whose deletedRecord is `no` or `transient`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    schedule: str = "0 3 * * 0"  # cron, UTC; default weekly (Sunday 03:00)
    # Refuse to delete more than this share of a source's live records in one reconciliation.
    max_delete_fraction: float = Field(default=0.10, ge=0, le=1)


class CswSettings(BaseModel):
    """Options of `protocol: csw` sources (OGC CSW 2.0.2)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    type_names: str = "csw:Record"
    output_schema: str = "http://www.opengis.net/cat/csw/2.0.2"
    modified_queryable: str = "dct:modified"
    page_size: int = Field(default=100, ge=1)
    extra_filter: str | None = None  # an OGC Filter Encoding fragment ANDed with the window


class SourceConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    protocol: Literal["oai-pmh", "csw"] = "oai-pmh"
    url: str
    metadata_prefix: str = "oai_dc"
    set: str | None = None
    window: Literal["hour", "day", "week", "month"] = "day"
    start: datetime | None = None
    # header name -> env var name holding its value (API keys and the like)
    headers_from_env: dict[str, str] = Field(default_factory=dict)
    auth: AuthConfig | None = None
    http: HttpSettings = Field(default_factory=HttpSettings)
    # Windows harvested one after another in one Dagster run (BackfillPolicy.multi_run and the
    # sensor's ranged runs); each window keeps its own traversal, cursor, ledger row and checks.
    windows_per_run: int = Field(default=30, ge=1)
    # Windows the sensor keeps requested at once (queued or running) for this source.
    max_windows_per_tick: int = Field(default=300, ge=1)
    # Re-harvest this much before the watermark, for servers whose indexes lag behind their clock.
    overlap_seconds: int = Field(default=0, ge=0)
    reconcile: ReconcileSettings = Field(default_factory=ReconcileSettings)
    csw: CswSettings | None = None
    traversal: TraversalLimits = Field(default_factory=TraversalLimits)
    # Query parameters of `url` whose values are secrets (besides names like key/token/secret and
    # values written as ${VAR}, which the loader adds): redacted wherever text is written or printed.
    secret_params: list[str] = Field(default_factory=list)

    @field_validator("id")
    @classmethod
    def _id_is_safe(cls, v: str) -> str:
        if not SOURCE_ID_RE.fullmatch(v):
            raise ValueError(
                f"{v!r} must be lowercase letters, digits and '_' only (it becomes an asset key and a file name)"
            )
        if len(v) > SOURCE_ID_MAX_LENGTH:
            raise ValueError(
                f"must be at most {SOURCE_ID_MAX_LENGTH} characters (it is {len(v)}); "
                "it becomes file names, asset keys and pool names"
            )
        return v

    @field_validator("url")
    @classmethod
    def _url_is_http(cls, v: str) -> str:
        if not re.match(r"^https?://[^/\s]+", v):
            raise ValueError("must be an http(s) URL of the OAI-PMH base URL")
        if re.match(r"^https?://[^/]*@", v):
            raise ValueError("must not embed credentials; use auth.username_env/password_env")
        return v

    @field_validator("start")
    @classmethod
    def _start_is_utc(cls, v: datetime | None) -> datetime | None:
        if v is None:
            return None
        return v.replace(tzinfo=timezone.utc) if v.tzinfo is None else v.astimezone(timezone.utc)

    @model_validator(mode="after")
    def _protocol_options_match(self) -> "SourceConfig":
        if self.protocol == "csw" and self.csw is None:
            object.__setattr__(self, "csw", CswSettings())
        if self.protocol == "oai-pmh" and self.csw is not None:
            raise ValueError("csw: options given for an oai-pmh source")
        return self

    @model_validator(mode="after")
    def _env_vars_exist_lazily(self) -> "SourceConfig":
        # Env vars are read when a request is made (so the UI loads without secrets), but the
        # names must at least look like env var names.
        for header, env in self.headers_from_env.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", env):
                raise ValueError(f"headers_from_env.{header}: '{env}' is not an env var name")
        return self

    @model_validator(mode="after")
    def _secrets_are_known(self) -> "SourceConfig":
        # Registered at load, so every message and stored text of this process is redacted.
        register_secrets(self.secret_values())
        return self

    def secret_values(self) -> list[str]:
        """Every secret this source is configured with, as far as the environment has them:
        header values from env, basic-auth user and password, secret query values of `url`."""
        out = secret_query_values(self.url, self.secret_params)
        out += [os.environ[env] for env in self.headers_from_env.values() if env in os.environ]
        if self.auth is not None:
            out += [os.environ[e] for e in (self.auth.username_env, self.auth.password_env) if e in os.environ]
        return out

    def http_headers(self) -> dict[str, str]:
        """Headers with their secret values resolved from the environment (never log these)."""
        out = {}
        for header, env in self.headers_from_env.items():
            value = os.environ.get(env)
            if value is None:
                raise ConfigError(
                    f"env var {env} (for header {header}) is not set",
                    source_id=self.id,
                    hint=f"export {env}=... before starting Dagster or the CLI",
                )
            out[header] = value
            register_secrets([value])
        return out

    def http_auth(self) -> tuple[str, str] | None:
        if self.auth is None:
            return None
        missing = [e for e in (self.auth.username_env, self.auth.password_env) if e not in os.environ]
        if missing:
            raise ConfigError(
                f"env var(s) {', '.join(missing)} for basic auth are not set",
                source_id=self.id,
                hint="export them before starting Dagster or the CLI",
            )
        pair = (os.environ[self.auth.username_env], os.environ[self.auth.password_env])
        register_secrets(pair)
        return pair


def _expand_env(value):
    """`${VAR}` and `${VAR:-default}` in string values, so one file serves demo, tests and prod."""
    if isinstance(value, str):
        return _ENV_REF.sub(lambda m: os.environ.get(m.group(1), m.group(2) or ""), value)
    if isinstance(value, list):
        return [_expand_env(v) for v in value]
    if isinstance(value, dict):
        return {k: _expand_env(v) for k, v in value.items()}
    return value


def _mark_env_params_secret(raw: dict) -> dict:
    """Query parameters of `url` written as ${VAR} hold secrets, whatever their names."""
    url = raw.get("url")
    if not isinstance(url, str) or "${" not in url:
        return raw
    names = [name for name, value in parse_qsl(urlsplit(url).query) if _ENV_REF.search(value)]
    if not names:
        return raw
    given = raw.get("secret_params") if isinstance(raw.get("secret_params"), list) else []
    return {**raw, "secret_params": [*given, *(n for n in names if n not in given)]}


def _describe(err: ValidationError, source_label: str, path: Path) -> str:
    lines = []
    for e in err.errors():
        field = ".".join(str(p) for p in e["loc"]) or "(source)"
        lines.append(f"{path}: source {source_label}: field '{field}': {e['msg']}")
    return "\n".join(lines)


# libyaml's safe loader where PyYAML was built with it (its wheels are): 20 ms instead of 147 for
# a file of 1,000 sources, paid by every definitions load (each run process, the code server).
_SAFE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def load_sources(path: str | Path | None = None) -> list[SourceConfig]:
    """Read every source; raise ConfigError naming the source and field on the first bad one."""
    path = Path(path) if path else sources_file_path()
    if not path.exists():
        raise ConfigError(
            f"sources file {path} does not exist",
            hint="set HARVEST_SOURCES_FILE or create the file (see README, 'Adding a source')",
        )
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"), Loader=_SAFE_LOADER) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc
    raw_sources = doc.get("sources") if isinstance(doc, dict) else None
    if not isinstance(raw_sources, list):
        raise ConfigError(f"{path}: expected a top-level 'sources:' list")

    sources: list[SourceConfig] = []
    seen: set[str] = set()
    for i, raw in enumerate(raw_sources):
        label = f"#{i + 1}"
        if isinstance(raw, dict) and isinstance(raw.get("id"), str):
            label = f"'{raw['id']}'"
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: source {label}: expected a mapping of fields")
        raw = _mark_env_params_secret(raw)
        try:
            src = SourceConfig.model_validate(_expand_env(raw))
        except ValidationError as exc:
            raise ConfigError(_describe(exc, label, path)) from None
        if src.id in seen:
            raise ConfigError(f"{path}: source {label}: field 'id': duplicate id '{src.id}'")
        seen.add(src.id)
        sources.append(src)
    return sources
