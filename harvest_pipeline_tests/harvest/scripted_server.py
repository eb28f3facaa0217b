"""A tiny OAI-PMH server on 127.0.0.1 that answers ListRecords with pages a test writes by hand.

For behaviour the demo provider does not model (odd identifiers, implausible datestamps): the
test gives the records of each page; Identify and the envelope are filled in, and every request
is recorded.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qsl, urlsplit

OAI_HEAD = ('<?xml version="1.0" encoding="UTF-8"?>\n'
            '<OAI-PMH xmlns="http://www.openarchives.org/OAI/2.0/">'
            "<responseDate>{response_date}</responseDate><request>{url}</request>")
DC = ('<oai_dc:dc xmlns:oai_dc="http://www.openarchives.org/OAI/2.0/oai_dc/" '
      'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>{title}</dc:title></oai_dc:dc>')


def record(identifier: str, datestamp: str, title: str = "a title") -> str:
    return (f"<record><header><identifier>{identifier}</identifier><datestamp>{datestamp}</datestamp>"
            f"</header><metadata>{DC.format(title=title)}</metadata></record>")


class ScriptedOAI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, pages: list[list[str]], *, response_date: str | None = None, complete_list_size: int | None = None):
        """`pages`: the <record> strings of each page; the last page ends with an empty token."""
        super().__init__(("127.0.0.1", 0), _Handler)
        self.pages = pages
        self.response_date = response_date or datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.complete_list_size = complete_list_size if complete_list_size is not None else sum(map(len, pages))
        self.requests: list[dict] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/oai"

    def answer(self, args: dict) -> bytes:
        head = OAI_HEAD.format(response_date=self.response_date, url=self.url)
        verb = args.get("verb")
        if verb == "Identify":
            body = ("<Identify><repositoryName>scripted</repositoryName>"
                    f"<baseURL>{self.url}</baseURL><protocolVersion>2.0</protocolVersion>"
                    "<adminEmail>a@example.org</adminEmail><earliestDatestamp>2000-01-01T00:00:00Z</earliestDatestamp>"
                    "<deletedRecord>persistent</deletedRecord><granularity>YYYY-MM-DDThh:mm:ssZ</granularity></Identify>")
        elif verb == "ListRecords":
            n = int(args.get("resumptionToken", "0"))
            last = n + 1 >= len(self.pages)
            token = "" if last else str(n + 1)
            cursor = sum(len(p) for p in self.pages[:n])
            rt = (f'<resumptionToken completeListSize="{self.complete_list_size}" cursor="{cursor}">{token}'
                  "</resumptionToken>") if len(self.pages) > 1 else ""
            body = f"<ListRecords>{''.join(self.pages[n])}{rt}</ListRecords>"
        elif verb == "GetRecord":
            wanted = args.get("identifier")
            found = [r for p in self.pages for r in p if f"<identifier>{wanted}</identifier>" in r]
            body = f"<GetRecord>{found[-1]}</GetRecord>" if found else '<error code="idDoesNotExist">no</error>'
        else:
            body = f'<error code="badVerb">{verb}</error>'
        return (head + body + "</OAI-PMH>").encode("utf-8")


class _Handler(BaseHTTPRequestHandler):
    server: ScriptedOAI

    def log_message(self, *args):
        pass

    def do_GET(self):  # noqa: N802
        args = dict(parse_qsl(urlsplit(self.path).query, keep_blank_values=True))
        self.server.requests.append(args)
        body = self.server.answer(args)
        self.send_response(200)
        self.send_header("Content-Type", "text/xml; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_POST = do_GET


@contextmanager
def scripted_oai(pages: list[list[str]], **kw):
    server = ScriptedOAI(pages, **kw)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
