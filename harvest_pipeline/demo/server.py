"""OAI-PMH 2.0 data provider over HTTP for the demo corpus (stdlib http.server only).

`OAIProvider.handle()` turns request arguments into a response document (pure, testable
without sockets); `DemoHTTPServer` serves it at /oai (GET and POST) next to small JSON
admin endpoints that tests use to inspect and mutate the corpus and to switch fault modes.

Responses are built by string concatenation, not lxml: the provider also serves benchmarks,
and a 100-record page must cost milliseconds.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import hmac
import json
import re
import sys
import threading
import time
import traceback
from dataclasses import dataclass, fields
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

from . import faults as _faults
from .corpus import (
    ID_PREFIX,
    METADATA_FORMATS,
    REPOSITORY_IDENTIFIER,
    SETS,
    Corpus,
    RecordView,
    format_ts,
    to_epoch,
    xml_escape,
)
from .faults import FAULT_CHECKS, FaultOptions, FaultState

OAI_PATH = "/oai"
GRANULARITY_SECONDS = "YYYY-MM-DDThh:mm:ssZ"
GRANULARITY_DAY = "YYYY-MM-DD"
_GRANULARITY_ALIASES = {"seconds": "seconds", "second": "seconds", GRANULARITY_SECONDS: "seconds",
                        "day": "day", "days": "day", GRANULARITY_DAY: "day"}


# ---- options ---------------------------------------------------------------------------

def _check_positive(name, v):
    if v < 1:
        raise ValueError(f"{name} must be >= 1")


def _check_granularity(name, v):
    if v not in ("seconds", "day"):
        raise ValueError(f"{name} must be 'seconds' or 'day'")


@dataclass(frozen=True)
class ServerOptions(FaultOptions):
    """Behaviour knobs, including "fault/lie" modes, settable from the CLI and at runtime.

    Frozen: the provider swaps the whole object on update, so a request always sees one
    consistent set of options.  The fault modes are the fields inherited from
    :class:`~.faults.FaultOptions` (documented in faults.py); to add one, add a field with a
    harmless default there (and, if needed, a check in FAULT_CHECKS); CLI (`--fault k=v`), JSON
    admin endpoint and process helper pick it up by name.
    """

    page_size: int = 100
    token_ttl: int = 600  # seconds a resumptionToken stays valid
    granularity: str = "seconds"  # "seconds" | "day"
    complete_list_size_bias: int = 0  # added to the reported completeListSize: a server that lies
    repository_name: str = "Demo Harvest Repository"
    admin_email: str = "admin@demo.harvest.example"
    # "persistent" | "transient" | "no": with the last two, deleted records vanish from lists and GetRecord.
    deleted_record: str = "persistent"
    # CSW (/csw, demo/csw.py): serve at most this many records per page without saying so (0 = off)
    csw_max_records_cap: int = 0
    csw_stuck_next_record: bool = False  # CSW: nextRecord repeats startPosition (a broken server)

    def __post_init__(self) -> None:
        if self.granularity in _GRANULARITY_ALIASES:
            object.__setattr__(self, "granularity", _GRANULARITY_ALIASES[self.granularity])
        for f in fields(self):
            value = getattr(self, f.name)
            want = {"int": int, "str": str, "float": float, "bool": bool}.get(str(f.type))
            if want is int and isinstance(value, bool) or want and not isinstance(value, want):
                raise ValueError(f"{f.name} must be {f.type}, got {value!r}")
            check = _CHECKS.get(f.name)
            if check:
                check(f.name, value)

    def replace(self, **changes) -> "ServerOptions":
        """A copy with `changes`, coercing strings from CLI/forms; ValueError on unknown keys or bad values."""
        known = {f.name: str(f.type) for f in fields(self)}
        coerced = {}
        for key, value in changes.items():
            key = key.replace("-", "_")
            if key not in known:
                raise ValueError(f"unknown option {key!r} (known: {', '.join(sorted(known))})")
            coerced[key] = _coerce(known[key], value, key)
        return dataclasses.replace(self, **coerced)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @property
    def day_granularity(self) -> bool:
        return self.granularity == "day"

    @property
    def granularity_label(self) -> str:
        return GRANULARITY_DAY if self.day_granularity else GRANULARITY_SECONDS


def _check_deleted_record(name, v):
    if v not in ("persistent", "transient", "no"):
        raise ValueError(f"{name} must be 'persistent', 'transient' or 'no'")


_CHECKS = {**FAULT_CHECKS, "page_size": _check_positive, "token_ttl": _check_positive, "granularity": _check_granularity,
           "deleted_record": _check_deleted_record}


def _coerce(kind: str, value, key: str):
    if not isinstance(value, str) or kind == "str":
        return value
    try:
        if kind == "int":
            return int(value)
        if kind == "float":
            return float(value)
        if kind == "bool":
            return value.strip().lower() in ("1", "true", "yes", "on")
    except ValueError:
        raise ValueError(f"{key} must be {kind}, got {value!r}") from None
    return value


# ---- protocol --------------------------------------------------------------------------

class _OAIError(Exception):
    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


# verb -> (required, optional); "exclusive" verbs also accept resumptionToken alone.
_VERBS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "Identify": ((), ()),
    "ListMetadataFormats": ((), ("identifier",)),
    "ListSets": ((), ()),
    "ListIdentifiers": (("metadataPrefix",), ("from", "until", "set")),
    "ListRecords": (("metadataPrefix",), ("from", "until", "set")),
    "GetRecord": (("identifier", "metadataPrefix"), ()),
}
_EXCLUSIVE = {"ListSets", "ListIdentifiers", "ListRecords"}

_DAY_RE = re.compile(r"\d{4}-\d{2}-\d{2}\Z", re.ASCII)
_SEC_RE = re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z\Z", re.ASCII)

_HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n'
         '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/" '
         'xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance" '
         'xsi:schemaLocation="http://www.openarchives.org/OAI/2.0/ '
         'http://www.openarchives.org/OAI/2.0/OAI-PMH.xsd">\n')


def _parse_date(name: str, value: str, day_only: bool) -> tuple[int, bool]:
    """(epoch seconds of the value's start, is_day) or badArgument."""
    if _DAY_RE.match(value):
        fmt, is_day = "%Y-%m-%d", True
    elif _SEC_RE.match(value):
        if day_only:
            raise _OAIError("badArgument", f"{name}={value} is finer than the repository granularity YYYY-MM-DD")
        fmt, is_day = "%Y-%m-%dT%H:%M:%SZ", False
    else:
        raise _OAIError("badArgument", f"{name}={value} is not a UTCdatetime (YYYY-MM-DD or YYYY-MM-DDThh:mm:ssZ)")
    try:
        dt = datetime.strptime(value, fmt)
    except ValueError:
        raise _OAIError("badArgument", f"{name}={value} is not a valid date") from None
    return to_epoch(dt), is_day


class OAIProvider:
    """Answers OAI-PMH requests for one corpus; thread-safe (the corpus locks, options are swapped)."""

    def __init__(self, corpus: Corpus, options: ServerOptions | None = None):
        self.corpus = corpus
        self.options = options or ServerOptions()
        # Tokens are signed so that garbage and tampering give badResumptionToken; the key is
        # derived from the seed, so tokens survive a restart of the same corpus.
        self._token_key = hashlib.sha256(f"demo.harvest:{corpus.config.seed}".encode()).digest()
        self._opt_lock = threading.Lock()
        self.faults = FaultState()  # the request counter of the "every Nth" fault modes
        self._req = threading.local()  # the current request's number, for list-level faults

    # -- options -------------------------------------------------------------------------

    def update_options(self, changes: dict) -> ServerOptions:
        """Apply runtime option changes; the pseudo-option `now` moves the corpus clock, and
        `faults` applies a preset of faults.py (before the other changes). Every change
        restarts the fault request counter."""
        changes = dict(changes)
        preset = changes.pop("faults", None)
        with self._opt_lock:
            base = self.options.replace(**_faults.preset(preset)) if preset else self.options
            new = base.replace(**{k: v for k, v in changes.items() if k != "now"})
            self.faults.reset()
            if "now" in changes:
                self.corpus.set_now(changes["now"] or None)
            self.options = new
            return new

    def options_dict(self) -> dict:
        d = self.options.to_dict()
        d["now"] = format_ts(self.corpus.now_ts()) if self.corpus.frozen else None
        return d

    # -- entry point ---------------------------------------------------------------------

    def handle(self, pairs: list[tuple[str, str]], base_url: str, request_no: int | None = None) -> bytes:
        """One OAI-PMH request (argument pairs in request order) -> UTF-8 response body.

        `request_no` is the request's number for the "every Nth" fault modes (the HTTP layer
        counts; None: count here)."""
        opts = self.options
        n = self.faults.next() if request_no is None else request_no
        self._req.n = n
        self._req.list_page = False
        out = self._handle(pairs, base_url, opts)
        if opts.bad_bytes:
            out = out.replace(_faults.BAD_BYTES_PLACEHOLDER.encode("utf-8"), _faults.BAD_BYTES)
        if opts.entity_attack != "off":
            out = _faults.apply_entity_attack(out, opts.entity_attack)
        if self._req.list_page and _faults.every(n, opts.malformed_page_every):
            out = _faults.malform_page(out)
        return out

    def _handle(self, pairs: list[tuple[str, str]], base_url: str, opts: "ServerOptions") -> bytes:
        now = self.corpus.now_ts()
        head = f"{_HEAD}<responseDate>{format_ts(now)}</responseDate>\n"
        base_x = xml_escape(base_url)
        try:
            verb, args = self._check_args(pairs, opts)
        except _OAIError as e:
            # badVerb/badArgument: the spec wants the bare base URL, no attributes.
            return self._doc(head, f"<request>{base_x}</request>\n", self._error(e))
        echo = self._clamped_echo(args, opts, now) if opts.clamp_until and "until" in args else args
        attrs = "".join(f' {k}="{xml_escape(v)}"' for k, v in [("verb", verb)] + list(echo.items()))
        request = f"<request{attrs}>{base_x}</request>\n"
        try:
            body = getattr(self, "_" + verb)(args, opts, now, base_url)
        except _OAIError as e:
            if e.code in ("badVerb", "badArgument"):
                request = f"<request>{base_x}</request>\n"
            return self._doc(head, request, self._error(e))
        return self._doc(head, request, body)

    @staticmethod
    def _clamped_until(opts: "ServerOptions", now: int) -> int:
        return now - opts.clamp_until

    def _clamped_echo(self, args: dict, opts: "ServerOptions", now: int) -> dict:
        """Fault clamp_until: the <request> echo shows the clamped until (hi is clamped in _list)."""
        try:
            hi, is_day = _parse_date("until", args["until"], opts.day_granularity)
        except _OAIError:
            return args
        limit = self._clamped_until(opts, now)
        if hi + (86399 if is_day else 0) <= limit:
            return args
        # Day granularity: the last whole day that ends by the limit.
        value = format_ts(((limit + 1) // 86400) * 86400 - 86400, True) if is_day else format_ts(limit)
        return {**args, "until": value}

    @staticmethod
    def _doc(head: str, request: str, body: str) -> bytes:
        return "".join((head, request, body, "</OAI-PMH>\n")).encode("utf-8")

    @staticmethod
    def _error(e: _OAIError) -> str:
        return f'<error code="{e.code}">{xml_escape(e.message)}</error>\n'

    def _check_args(self, pairs, opts: "ServerOptions | None" = None) -> tuple[str, dict[str, str]]:
        verbs = [v for k, v in pairs if k == "verb"]
        if not verbs:
            raise _OAIError("badVerb", "the verb argument is missing")
        if len(verbs) > 1:
            raise _OAIError("badVerb", "the verb argument is repeated")
        verb = verbs[0]
        if verb not in _VERBS:
            raise _OAIError("badVerb", f"illegal verb {verb!r}")
        required, optional = _VERBS[verb]
        allowed = set(required) | set(optional) | ({"resumptionToken"} if verb in _EXCLUSIVE else set())
        args: dict[str, str] = {}
        for k, v in pairs:
            if k == "verb":
                continue
            if k not in allowed:
                raise _OAIError("badArgument", f"illegal argument {k!r} for {verb}")
            if k in args:
                raise _OAIError("badArgument", f"argument {k!r} is repeated")
            if v == "":
                raise _OAIError("badArgument", f"argument {k!r} is empty")
            args[k] = v
        if "resumptionToken" in args:
            if opts is not None and opts.reject_token_only:  # fault: wants the original arguments too
                if len(args) == 1:
                    raise _OAIError("badArgument", "repeat the original arguments (metadataPrefix, "
                                    "from, until, set) together with resumptionToken")
            elif len(args) > 1:
                raise _OAIError("badArgument", "resumptionToken is an exclusive argument")
        else:
            missing = [k for k in required if k not in args]
            if missing:
                raise _OAIError("badArgument", f"missing required argument(s): {', '.join(missing)}")
        return verb, args

    # -- verbs ---------------------------------------------------------------------------

    def _Identify(self, args, opts: ServerOptions, now, base_url) -> str:
        earliest = self.corpus.earliest_datestamp()
        earliest = now if earliest is None else earliest
        sample = f"{ID_PREFIX}{self.corpus.first_day.isoformat()}/{0:05d}"
        return (
            "<Identify>"
            f"<repositoryName>{xml_escape(opts.repository_name)}</repositoryName>"
            f"<baseURL>{xml_escape(base_url)}</baseURL>"
            "<protocolVersion>2.0</protocolVersion>"
            f"<adminEmail>{xml_escape(opts.admin_email)}</adminEmail>"
            f"<earliestDatestamp>{format_ts(earliest, opts.day_granularity)}</earliestDatestamp>"
            f"<deletedRecord>{opts.deleted_record}</deletedRecord>"
            f"<granularity>{opts.granularity_label}</granularity>"
            "<description><oai-identifier xmlns=\"http://www.openarchives.org/OAI/2.0/oai-identifier\" "
            "xsi:schemaLocation=\"http://www.openarchives.org/OAI/2.0/oai-identifier "
            "http://www.openarchives.org/OAI/2.0/oai-identifier.xsd\">"
            f"<scheme>oai</scheme><repositoryIdentifier>{REPOSITORY_IDENTIFIER}</repositoryIdentifier>"
            f"<delimiter>:</delimiter><sampleIdentifier>{sample}</sampleIdentifier>"
            "</oai-identifier></description>"
            "</Identify>\n"
        )

    def _ListMetadataFormats(self, args, opts, now, base_url) -> str:
        if "identifier" in args and self.corpus.get(args["identifier"]) is None:
            raise _OAIError("idDoesNotExist", f"unknown identifier {args['identifier']!r}")
        items = "".join(
            f"<metadataFormat><metadataPrefix>{p}</metadataPrefix><schema>{s}</schema>"
            f"<metadataNamespace>{ns}</metadataNamespace></metadataFormat>"
            for p, (s, ns) in METADATA_FORMATS.items())
        return f"<ListMetadataFormats>{items}</ListMetadataFormats>\n"

    def _ListSets(self, args, opts, now, base_url) -> str:
        if "resumptionToken" in args:  # the set list always fits one response
            raise _OAIError("badResumptionToken", "ListSets never issues resumption tokens")
        items = "".join(
            f"<set><setSpec>{spec}</setSpec><setName>{xml_escape(name)}</setName><setDescription>"
            '<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
            'xmlns:dc="http://purl.org/dc/elements/1.1/" xsi:schemaLocation="http://www.openarchives.org/OAI/2.0/oai_dc/ '
            f'http://www.openarchives.org/OAI/2.0/oai_dc.xsd"><dc:description>{xml_escape(desc)}</dc:description>'
            "</oai_dc:dc></setDescription></set>"
            for spec, name, desc in SETS)
        return f"<ListSets>{items}</ListSets>\n"

    def _GetRecord(self, args, opts, now, base_url) -> str:
        prefix = args["metadataPrefix"]
        view = self.corpus.get(args["identifier"])
        if view is None or (view.deleted and opts.deleted_record != "persistent"):
            raise _OAIError("idDoesNotExist", f"unknown identifier {args['identifier']!r}")
        if prefix not in METADATA_FORMATS:
            raise _OAIError("cannotDisseminateFormat", f"metadataPrefix {prefix!r} is not supported")
        return f"<GetRecord>{self._record(view, prefix, opts.day_granularity, opts)}</GetRecord>\n"

    def _ListIdentifiers(self, args, opts, now, base_url) -> str:
        return self._list("ListIdentifiers", args, opts, now)

    def _ListRecords(self, args, opts, now, base_url) -> str:
        return self._list("ListRecords", args, opts, now)

    # -- lists ---------------------------------------------------------------------------

    def _list(self, verb: str, args: dict, opts: ServerOptions, now: int) -> str:
        day = opts.day_granularity
        if "resumptionToken" in args:
            tok = self._decode_token(args["resumptionToken"], verb)
            if opts.token_expires_after_pages and tok["c"] // opts.page_size >= opts.token_expires_after_pages:
                raise _OAIError("badResumptionToken", "the resumptionToken has expired")  # fault
            prefix, set_spec, lo, hi = tok["m"], tok["s"], tok["lo"], tok["hi"]
            self._gateway_timeout_if_too_long(opts, lo, hi)
            after, cursor, size, snapshot = (tok["d"], tok["i"]), tok["c"], tok["n"], tok["q"]
            if tok["d"] is None:  # fault restart_list: this token starts the list again
                after = None
            origin = {k: v for k, v in tok.items() if k not in ("e", "t", "x", "d", "i", "c")}
            self._req.list_page = True
            if tok.get("e"):  # fault extra_empty_page: the page after the last one is empty
                rt = "" if opts.no_final_token_element else self._token_element("", size, cursor, opts, now)
                return f"<{verb}>{rt}</{verb}>\n"
        else:
            prefix = args["metadataPrefix"]
            if opts.reject_dates and ("from" in args or "until" in args):
                raise _OAIError("badArgument", "this repository does not support from/until")
            if opts.reject_set_with_dates and "set" in args and ("from" in args or "until" in args):
                raise _OAIError("badArgument", "set cannot be combined with from/until")  # fault
            lo = hi = None
            f_is_day = u_is_day = None
            if "from" in args:
                lo, f_is_day = _parse_date("from", args["from"], day)
            if "until" in args:
                hi, u_is_day = _parse_date("until", args["until"], day)
            if lo is not None and hi is not None:
                if f_is_day != u_is_day:
                    raise _OAIError("badArgument", "from and until have different granularities")
                if lo > hi:
                    raise _OAIError("badArgument", "from is later than until")
            if u_is_day:
                hi += 86399  # a day `until` includes the whole day
            if opts.dates_to_whole_days:  # fault: only the date part of from/until is read
                lo = None if lo is None else lo - lo % 86400
                hi = None if hi is None else hi - hi % 86400 + 86399
            if opts.ignore_dates:  # fault: from/until silently ignored
                lo = hi = None
            if prefix not in METADATA_FORMATS:
                raise _OAIError("cannotDisseminateFormat", f"metadataPrefix {prefix!r} is not supported")
            set_spec = args.get("set")
            if set_spec is not None and not self.corpus.known_set(set_spec):
                raise _OAIError("noRecordsMatch", f"no set {set_spec!r} in this repository")
            lo = 0 if lo is None else lo
            snapshot = self.corpus.mutation_seq
            # Freeze the window's upper bound at the first request: records changed during the
            # traversal move past it instead of showing up twice (keyset paging + snapshot bound);
            # `snapshot` covers runtime touches that land exactly on that bound (frozen clock).
            hi = now if hi is None else min(hi, now)
            if opts.index_lag_seconds:  # fault: the newest records are not indexed yet
                hi = min(hi, now - opts.index_lag_seconds)
            if opts.clamp_until and "until" in args:  # fault: until capped at the clock minus N
                hi = min(hi, self._clamped_until(opts, now))
            self._gateway_timeout_if_too_long(opts, lo, hi)
            size = self.corpus.count(lo, hi, set_spec) if lo <= hi else 0
            if size and opts.deleted_record != "persistent":  # deletions are not listed: nor counted
                size = self.corpus.stats(until=hi, from_=lo, set_spec=set_spec)["live"]
            if size == 0:
                raise _OAIError("noRecordsMatch", "the combination of arguments results in an empty list")
            # Fixed for the whole traversal; the schema wants a positiveInteger even from a liar.
            size = max(1, size + opts.complete_list_size_bias)
            after, cursor = None, 0
            origin = {"v": verb, "m": prefix, "f": args.get("from"), "u": args.get("until"), "s": set_spec,
                      "lo": lo, "hi": hi, "n": size, "q": snapshot}
        self._req.list_page = True
        views = self.corpus.list_page(lo, hi, set_spec, after, opts.page_size + 1, snapshot)
        if not views:  # everything left moved out of the window during the traversal
            raise _OAIError("noRecordsMatch", "no records left in this list")
        more = len(views) > opts.page_size
        if more:
            del views[opts.page_size:]
        last = views[-1]  # the keyset position, even when it is a hidden deletion
        if opts.deleted_record != "persistent":
            views = [v for v in views if not v.deleted]
        before, beyond = [], []
        if opts.out_of_window_records and after is None and "resumptionToken" not in args and (
                "from" in args or "until" in args):  # fault: a few records outside the window
            k = opts.out_of_window_records
            if lo > 0:
                before = self.corpus.list_page(max(0, lo - 7 * 86400), lo - 1, set_spec, None, k, snapshot)
            if hi < now:
                beyond = self.corpus.list_page(hi + 1, now, set_spec, None, k, snapshot)
        page = before + views + beyond
        hday = day or opts.date_only_datestamps
        if verb == "ListRecords":
            broken = None
            if _faults.every(self._req.n, opts.broken_record_every):
                broken = next((v.identifier for v in views if not v.deleted), None)
            items = "".join(self._record(v, prefix, day, opts, broken=v.identifier == broken) for v in page)
        else:
            items = "".join(self._header(v, hday) for v in page)
        issued = int(time.time())

        def new_token(**position) -> str:
            return self._encode_token({**origin, **position, "t": issued, "x": issued + opts.token_ttl})

        multi_page = after is not None or "resumptionToken" in args
        if opts.repeat_token and "resumptionToken" in args and cursor // opts.page_size >= opts.repeat_token:
            # fault repeat_token: the same token (hence the same page) again and again
            rt = self._token_element(args["resumptionToken"], size, cursor, opts, now)
        elif more and opts.restart_list_at and cursor // opts.page_size + 1 == opts.restart_list_at:
            # fault restart_list_at: this page, before the end, carries a token that restarts the list
            rt = self._token_element(new_token(d=None, i=None, c=0), size, cursor, opts, now)
        elif more:
            token = new_token(d=last.datestamp, i=last.identifier, c=cursor + len(views))
            rt = self._token_element(token, size, cursor, opts, now)
        elif multi_page and opts.restart_list:  # fault: the final token starts the list again
            rt = self._token_element(new_token(d=None, i=None, c=0), size, cursor, opts, now)
        elif multi_page and opts.extra_empty_page:  # fault: a token that leads to an empty page
            token = new_token(d=last.datestamp, i=last.identifier, c=cursor + len(views), e=1)
            rt = self._token_element(token, size, cursor, opts, now)
        elif multi_page and not opts.no_final_token_element:  # the last page: an empty token
            rt = self._token_element("", size, cursor, opts, now)
        else:
            rt = ""
        return f"<{verb}>{items}{rt}</{verb}>\n"

    def _gateway_timeout_if_too_long(self, opts: ServerOptions, lo: int, hi: int) -> None:
        """Fault gateway_timeout_over_seconds: a large range times out (HTTP 504)."""
        if not opts.gateway_timeout_over_seconds:
            return
        earliest = self.corpus.earliest_datestamp()
        span = hi - max(lo, earliest if earliest is not None else lo)
        if span > opts.gateway_timeout_over_seconds:
            raise _faults.GatewayTimeout(f"fault: a range of {span} s is more than {opts.gateway_timeout_over_seconds} s")

    @staticmethod
    def _token_element(token: str, size: int, cursor: int, opts: "ServerOptions", now: int) -> str:
        attrs = "" if opts.no_complete_list_size else f' completeListSize="{size}"'
        attrs += f' cursor="{cursor // opts.page_size if opts.wrong_cursor else cursor}"'
        if not token:
            return f"<resumptionToken{attrs}/>"
        return (f'<resumptionToken{attrs} expirationDate="{format_ts(now + opts.token_ttl)}">'
                f"{token}</resumptionToken>")

    @staticmethod
    def _header(v: RecordView, day: bool) -> str:
        specs = "".join(f"<setSpec>{s}</setSpec>" for s in v.set_specs)
        status = ' status="deleted"' if v.deleted else ""
        return (f"<header{status}><identifier>{v.identifier}</identifier>"
                f"<datestamp>{format_ts(v.datestamp, day)}</datestamp>{specs}</header>")

    def _record(self, v: RecordView, prefix: str, day: bool, opts: "ServerOptions | None" = None,
                broken: bool = False) -> str:
        if opts is not None and opts.date_only_datestamps:
            day = True
        if v.deleted:  # persistent deletion: header only, no metadata
            return f"<record>{self._header(v, day)}</record>"
        md = self.corpus.render(v, prefix)
        if opts is not None:
            md = _faults.taint_metadata(md, v.n, opts)
            if broken:
                md = _faults.break_metadata(md)
        return f"<record>{self._header(v, day)}<metadata>{md}</metadata></record>"

    # -- resumption tokens ---------------------------------------------------------------
    # Stateless: urlsafe base64 of compact JSON (original arguments, frozen window, keyset
    # position, cursor, completeListSize, issue/expiry wall time) + a truncated HMAC.

    def _encode_token(self, payload: dict) -> str:
        raw = json.dumps(payload, separators=(",", ":"), ensure_ascii=True).encode()
        sig = hmac.new(self._token_key, raw, hashlib.sha256).digest()[:9]
        return base64.urlsafe_b64encode(raw + sig).rstrip(b"=").decode("ascii")

    def _decode_token(self, token: str, verb: str) -> dict:
        bad = _OAIError("badResumptionToken", "the resumptionToken is invalid or unknown")
        try:
            blob = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        except (ValueError, TypeError):
            raise bad from None
        raw, sig = blob[:-9], blob[-9:]
        if len(blob) <= 9 or not hmac.compare_digest(sig, hmac.new(self._token_key, raw, hashlib.sha256).digest()[:9]):
            raise bad
        try:
            tok = json.loads(raw)
        except ValueError:
            raise bad from None
        if tok.get("v") != verb:
            raise _OAIError("badResumptionToken", f"this resumptionToken belongs to {tok.get('v')}, not {verb}")
        if time.time() > tok["x"]:
            raise _OAIError("badResumptionToken", "the resumptionToken has expired")
        return tok


# ---- HTTP --------------------------------------------------------------------------------

class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive; every response sets Content-Length
    server_version = "DemoOAI/1.0"
    disable_nagle_algorithm = True  # header+body are two writes: avoid the 40 ms Nagle/ACK stall
    timeout = 300  # idle keep-alive connections release their thread eventually
    server: "DemoHTTPServer"

    def log_message(self, format, *args):  # noqa: A002 - signature from the base class
        if self.server.verbose:
            sys.stderr.write(f"{self.address_string()} - {format % args}\n")

    def do_GET(self):
        self._dispatch()

    def do_POST(self):
        self._dispatch()

    def _send(self, status: int, body: bytes, ctype: str, headers: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    # -- network fault modes (faults.py) ----------------------------------------------------

    def _send_oai(self, pairs, base_url: str) -> None:
        """Answer one /oai request, applying the network fault modes of the current options."""
        provider = self.server.provider
        n = provider.faults.next()
        opts = provider.options
        accepts_gzip = "gzip" in (self.headers.get("Accept-Encoding") or "").lower()
        plan = _faults.network_plan(opts, n, accepts_gzip)
        if plan.slow_seconds:
            time.sleep(plan.slow_seconds)
        if plan.fail_status:
            headers = {"Retry-After": plan.retry_after} if plan.retry_after else None
            msg = f"fault: request {n} fails (fail_every={opts.fail_every})\n".encode()
            return self._send(plan.fail_status, msg, "text/plain; charset=utf-8", headers)
        if plan.bomb:
            return self._send_bomb(plan.bomb, opts.gzip_bomb_mb)
        if plan.empty:
            return self._send(200, b"", "text/xml; charset=utf-8")
        try:
            out = provider.handle(pairs, base_url, request_no=n)
        except _faults.GatewayTimeout as exc:
            return self._send(504, f"{exc}\n".encode(), "text/plain; charset=utf-8")
        headers = {}
        if opts.gzip_wrong_length and accepts_gzip and provider._req.list_page:
            return self._send_gzip_wrong_length(out)
        if plan.gzip:
            out = _faults.gzip_bytes(out)
            if plan.gzip == "header":
                headers = {"Content-Encoding": "gzip", "Vary": "Accept-Encoding"}
        if plan.truncate:
            return self._send_truncated(out, plan.truncate, headers)
        self._send(200, out, "text/xml; charset=utf-8", headers)

    def _send_truncated(self, body: bytes, style: str, headers: dict) -> None:
        """Half the body, then close: with the full Content-Length, or one chunk and no end."""
        half = body[: max(1, len(body) // 2)]
        self.send_response(200)
        self.send_header("Content-Type", "text/xml; charset=utf-8")
        for name, value in headers.items():
            self.send_header(name, value)
        if style == "chunked":
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self.wfile.write(f"{len(half):x}\r\n".encode() + half + b"\r\n")
        else:
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(half)
        self.wfile.flush()
        self.close_connection = True

    def _send_gzip_wrong_length(self, body: bytes) -> None:
        """Fault gzip_wrong_length: the gzip body, the uncompressed Content-Length, then close."""
        packed = _faults.gzip_bytes(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/xml; charset=utf-8")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(packed)
        self.wfile.flush()
        self.close_connection = True

    def _send_bomb(self, mode: str, mb: int) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/xml; charset=utf-8")
        if mode == "header":
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(_faults.bomb_length(mb)))
        self.end_headers()
        self.close_connection = True  # a client that gives up mid-body leaves nothing to reuse
        for piece in _faults.bomb_stream(mb):
            self.wfile.write(piece)

    def _json(self, status: int, obj) -> None:
        self._send(status, json.dumps(obj, ensure_ascii=False).encode("utf-8"), "application/json; charset=utf-8")

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            self.close_connection = True
            raise ValueError("chunked request bodies are not supported; send Content-Length")
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def _form(self, body: bytes) -> list[tuple[str, str]]:
        text = body.decode("utf-8")
        if "json" in self.headers.get("Content-Type", "") or text.lstrip().startswith("{"):
            obj = json.loads(text or "{}")
            if not isinstance(obj, dict):
                raise ValueError("JSON body must be an object")
            return list(obj.items())
        return parse_qsl(text, keep_blank_values=True, errors="strict")

    def _admin_refusal(self) -> str | None:
        """Why an /admin/* request may come from a web page rather than a test or a shell.

        A page on another site can make a browser POST here (a form, or `fetch` in no-cors
        mode), and DNS rebinding makes one send a foreign Host. Browsers always say where such
        a request comes from (Origin, or at least Referer); a form can only send
        application/x-www-form-urlencoded, multipart/form-data or text/plain, and `fetch` with
        application/json needs a CORS preflight this server never grants.
        """
        port = self.server.server_port
        own_hosts = {"127.0.0.1", "localhost", "[::1]", self.server.server_address[0]}
        host = self.headers.get("Host")
        if host is not None and host not in {f"{h}:{port}" for h in own_hosts}:
            return f"Host {host!r} is not this server (127.0.0.1:{port})"
        for header in ("Origin", "Referer"):
            value = self.headers.get(header)
            if value is None:
                continue
            origin = urlsplit(value)
            if origin.scheme != "http" or origin.hostname not in own_hosts | {"::1"} or origin.port != port:
                return f"cross-origin request ({header}: {value})"
        if self.command == "POST":
            ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
            if ctype != "application/json":
                return f"Content-Type {ctype or '(none)'!r}: send a JSON object with Content-Type: application/json"
        return None

    def _dispatch(self) -> None:
        try:
            parts = urlsplit(self.path)
            body = self._body() if self.command == "POST" else b""
            route = (self.command, parts.path.rstrip("/") or "/")
            if route[1].startswith("/admin/"):
                refusal = self._admin_refusal()
                if refusal is not None:
                    return self._json(403, {"error": f"refused: {refusal}"})
            if route[1] == OAI_PATH:
                try:
                    if self.command == "POST":
                        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
                    else:
                        pairs = parse_qsl(parts.query, keep_blank_values=True, errors="strict")
                except UnicodeDecodeError:  # not UTF-8: answer badArgument through the normal path
                    pairs = [("verb", "Identify"), ("(undecodable arguments)", "")]
                host = self.headers.get("Host") or f"{self.server.server_address[0]}:{self.server.server_port}"
                self._send_oai(pairs, f"http://{host}{OAI_PATH}")
            elif route[1] == "/csw":  # OGC CSW 2.0.2 over the same corpus (demo/csw.py)
                from .csw import CSW_PATH, serve_csw

                host = self.headers.get("Host") or f"{self.server.server_address[0]}:{self.server.server_port}"
                self._send(*serve_csw(self.server.provider, self.command, parts.query, body, f"http://{host}{CSW_PATH}"))
            elif route == ("GET", "/stats"):
                q = dict(parse_qsl(parts.query))
                self._json(200, self.server.provider.corpus.stats(
                    until=q.get("until") or None, from_=q.get("from") or None, set_spec=q.get("set") or None))
            elif route in (("POST", "/admin/touch"), ("POST", "/admin/delete")):
                args = dict(self._form(body))
                ident = args.get("identifier")
                if not ident:
                    return self._json(400, {"error": "missing identifier"})
                corpus = self.server.provider.corpus
                op = corpus.touch if route[1] == "/admin/touch" else corpus.delete
                try:
                    v = op(ident, at=args.get("at") or None)
                except KeyError:
                    return self._json(404, {"error": "idDoesNotExist", "identifier": ident})
                self._json(200, {"identifier": v.identifier, "datestamp": format_ts(v.datestamp),
                                 "deleted": v.deleted, "version": v.version})
            elif route == ("GET", "/admin/faults"):
                provider = self.server.provider
                self._json(200, {"requests": provider.faults.requests,
                                 "first_request_at": provider.faults.first_at,
                                 "last_request_at": provider.faults.last_at,
                                 "active": _faults.active_faults(provider.options),
                                 "presets": sorted(_faults.PRESETS)})
            elif route == ("GET", "/admin/options"):
                self._json(200, self.server.provider.options_dict())
            elif route == ("POST", "/admin/options"):
                self.server.provider.update_options(dict(self._form(body)))
                self._json(200, self.server.provider.options_dict())
            elif route == ("GET", "/health"):
                self._json(200, {"status": "ok"})
            elif route == ("GET", "/"):
                self._send(200, b"demo OAI-PMH provider: try /oai?verb=Identify\n", "text/plain; charset=utf-8")
            else:
                self._json(404, {"error": f"no route {self.command} {parts.path}"})
        except (ValueError, TypeError) as e:  # bad admin input (dates, option values, JSON)
            self._json(400, {"error": str(e)})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as e:  # never kill the server thread silently
            traceback.print_exc(file=sys.stderr)
            try:
                self._json(500, {"error": repr(e)})
            except OSError:
                self.close_connection = True


class DemoHTTPServer(ThreadingHTTPServer):
    """ThreadingHTTPServer bound to one OAIProvider."""

    daemon_threads = True  # stuck keep-alive connections must not block shutdown
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], provider: OAIProvider, verbose: bool = False):
        self.provider = provider
        self.verbose = verbose
        super().__init__(address, _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}{OAI_PATH}"


def make_server(corpus: Corpus, options: ServerOptions | None = None, host: str = "127.0.0.1",
                port: int = 0, verbose: bool = False) -> DemoHTTPServer:
    """Bind (port 0 = any free port) but do not serve yet: call serve_forever() or start_in_thread()."""
    return DemoHTTPServer((host, port), OAIProvider(corpus, options), verbose=verbose)


def start_in_thread(server: DemoHTTPServer) -> threading.Thread:
    """Serve from a daemon thread (in-process use); stop with server.shutdown(); server.server_close()."""
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                         name="demo-oai-provider", daemon=True)
    t.start()
    return t
