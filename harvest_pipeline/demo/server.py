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
class ServerOptions:
    """Behaviour knobs, including "fault/lie" modes, settable from the CLI and at runtime.

    Frozen: the provider swaps the whole object on update, so a request always sees one
    consistent set of options.  To add a fault mode, add a field with a harmless default
    (and, if needed, a check in _CHECKS); CLI, JSON admin endpoint and process helper pick
    it up by name.
    """

    page_size: int = 100
    token_ttl: int = 600  # seconds a resumptionToken stays valid
    granularity: str = "seconds"  # "seconds" | "day"
    complete_list_size_bias: int = 0  # added to the reported completeListSize: a server that lies
    repository_name: str = "Demo Harvest Repository"
    admin_email: str = "admin@demo.harvest.example"

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


_CHECKS = {"page_size": _check_positive, "token_ttl": _check_positive, "granularity": _check_granularity}


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

    # -- options -------------------------------------------------------------------------

    def update_options(self, changes: dict) -> ServerOptions:
        """Apply runtime option changes; the pseudo-option `now` moves the corpus clock."""
        changes = dict(changes)
        with self._opt_lock:
            new = self.options.replace(**{k: v for k, v in changes.items() if k != "now"})
            if "now" in changes:
                self.corpus.set_now(changes["now"] or None)
            self.options = new
            return new

    def options_dict(self) -> dict:
        d = self.options.to_dict()
        d["now"] = format_ts(self.corpus.now_ts()) if self.corpus.frozen else None
        return d

    # -- entry point ---------------------------------------------------------------------

    def handle(self, pairs: list[tuple[str, str]], base_url: str) -> bytes:
        """One OAI-PMH request (argument pairs in request order) -> UTF-8 response body."""
        opts = self.options
        now = self.corpus.now_ts()
        head = f"{_HEAD}<responseDate>{format_ts(now)}</responseDate>\n"
        base_x = xml_escape(base_url)
        try:
            verb, args = self._check_args(pairs)
        except _OAIError as e:
            # badVerb/badArgument: the spec wants the bare base URL, no attributes.
            return self._doc(head, f"<request>{base_x}</request>\n", self._error(e))
        attrs = "".join(f' {k}="{xml_escape(v)}"' for k, v in [("verb", verb)] + list(args.items()))
        request = f"<request{attrs}>{base_x}</request>\n"
        try:
            body = getattr(self, "_" + verb)(args, opts, now, base_url)
        except _OAIError as e:
            if e.code in ("badVerb", "badArgument"):
                request = f"<request>{base_x}</request>\n"
            return self._doc(head, request, self._error(e))
        return self._doc(head, request, body)

    @staticmethod
    def _doc(head: str, request: str, body: str) -> bytes:
        return "".join((head, request, body, "</OAI-PMH>\n")).encode("utf-8")

    @staticmethod
    def _error(e: _OAIError) -> str:
        return f'<error code="{e.code}">{xml_escape(e.message)}</error>\n'

    def _check_args(self, pairs) -> tuple[str, dict[str, str]]:
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
            if len(args) > 1:
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
            "<deletedRecord>persistent</deletedRecord>"
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
        if view is None:
            raise _OAIError("idDoesNotExist", f"unknown identifier {args['identifier']!r}")
        if prefix not in METADATA_FORMATS:
            raise _OAIError("cannotDisseminateFormat", f"metadataPrefix {prefix!r} is not supported")
        return f"<GetRecord>{self._record(view, prefix, opts.day_granularity)}</GetRecord>\n"

    def _ListIdentifiers(self, args, opts, now, base_url) -> str:
        return self._list("ListIdentifiers", args, opts, now)

    def _ListRecords(self, args, opts, now, base_url) -> str:
        return self._list("ListRecords", args, opts, now)

    # -- lists ---------------------------------------------------------------------------

    def _list(self, verb: str, args: dict, opts: ServerOptions, now: int) -> str:
        day = opts.day_granularity
        if "resumptionToken" in args:
            tok = self._decode_token(args["resumptionToken"], verb)
            prefix, set_spec, lo, hi = tok["m"], tok["s"], tok["lo"], tok["hi"]
            after, cursor, size, snapshot = (tok["d"], tok["i"]), tok["c"], tok["n"], tok["q"]
            origin = tok
        else:
            prefix = args["metadataPrefix"]
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
            size = self.corpus.count(lo, hi, set_spec) if lo <= hi else 0
            if size == 0:
                raise _OAIError("noRecordsMatch", "the combination of arguments results in an empty list")
            # Fixed for the whole traversal; the schema wants a positiveInteger even from a liar.
            size = max(1, size + opts.complete_list_size_bias)
            after, cursor = None, 0
            origin = {"v": verb, "m": prefix, "f": args.get("from"), "u": args.get("until"), "s": set_spec,
                      "lo": lo, "hi": hi, "n": size, "q": snapshot}
        views = self.corpus.list_page(lo, hi, set_spec, after, opts.page_size + 1, snapshot)
        if not views:  # everything left moved out of the window during the traversal
            raise _OAIError("noRecordsMatch", "no records left in this list")
        more = len(views) > opts.page_size
        if more:
            del views[opts.page_size:]
        if verb == "ListRecords":
            items = "".join(self._record(v, prefix, day) for v in views)
        else:
            items = "".join(self._header(v, day) for v in views)
        if more:
            last = views[-1]
            issued = int(time.time())
            token = self._encode_token({
                **origin, "d": last.datestamp, "i": last.identifier, "c": cursor + len(views),
                "t": issued, "x": issued + opts.token_ttl})
            rt = (f'<resumptionToken completeListSize="{size}" cursor="{cursor}" '
                  f'expirationDate="{format_ts(now + opts.token_ttl)}">{token}</resumptionToken>')
        elif after is not None:  # the last page of a multi-page list: an empty token
            rt = f'<resumptionToken completeListSize="{size}" cursor="{cursor}"/>'
        else:
            rt = ""
        return f"<{verb}>{items}{rt}</{verb}>\n"

    @staticmethod
    def _header(v: RecordView, day: bool) -> str:
        specs = "".join(f"<setSpec>{s}</setSpec>" for s in v.set_specs)
        status = ' status="deleted"' if v.deleted else ""
        return (f"<header{status}><identifier>{v.identifier}</identifier>"
                f"<datestamp>{format_ts(v.datestamp, day)}</datestamp>{specs}</header>")

    def _record(self, v: RecordView, prefix: str, day: bool) -> str:
        if v.deleted:  # persistent deletion: header only, no metadata
            return f"<record>{self._header(v, day)}</record>"
        return f"<record>{self._header(v, day)}<metadata>{self.corpus.render(v, prefix)}</metadata></record>"

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

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

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

    def _dispatch(self) -> None:
        try:
            parts = urlsplit(self.path)
            body = self._body() if self.command == "POST" else b""
            route = (self.command, parts.path.rstrip("/") or "/")
            if route[1] == OAI_PATH:
                try:
                    if self.command == "POST":
                        pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
                    else:
                        pairs = parse_qsl(parts.query, keep_blank_values=True, errors="strict")
                except UnicodeDecodeError:  # not UTF-8: answer badArgument through the normal path
                    pairs = [("verb", "Identify"), ("(undecodable arguments)", "")]
                host = self.headers.get("Host") or f"{self.server.server_address[0]}:{self.server.server_port}"
                out = self.server.provider.handle(pairs, f"http://{host}{OAI_PATH}")
                self._send(200, out, "text/xml; charset=utf-8")
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
