"""Every traversal is bounded (issue 11, item 4): token length and cycles, pages, records, time.

Small scripted servers on 127.0.0.1: an OAI-PMH list whose token grows every page, a
reconciliation listing whose tokens cycle A-B-A, a list that never ends and announces no size,
and a CSW catalogue announcing numberOfRecordsMatched = 10^9.
"""

from __future__ import annotations

import re
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from harvest_pipeline.errors import BudgetExceeded, HarvestError
from harvest_pipeline.harvest import harvest_window
from harvest_pipeline.harvest.budget import TraversalBudget
from harvest_pipeline.harvest.reconcile import reconcile_source
from harvest_pipeline.sources.registry import HttpSettings, SourceConfig, TraversalLimits
from harvest_pipeline.store import connect, ledger
from harvest_pipeline_tests.conftest import today, day_window
from harvest_pipeline_tests.csw.canned import PYCSW_CAPS, dc_record, results
from harvest_pipeline_tests.http.hostile import RawServer, response_head
from harvest_pipeline_tests.oai.canned import envelope, header, record, token
from harvest_pipeline_tests.oai.test_parse import identify_xml

pytestmark = pytest.mark.integration
WINDOW = day_window(2)
STAMP = (WINDOW.start.replace(hour=6)).strftime("%Y-%m-%dT%H:%M:%SZ")
LAST_PAGE = 40  # every scripted list ends here, so a harvest without the guard ends too


def _send(conn, body: bytes, content_type: str = "text/xml") -> None:
    conn.sendall(response_head("200 OK", {"Content-Type": content_type, "Content-Length": str(len(body))}) + body)


def oai_server(page_for):
    """An OAI-PMH server: Identify, and `page_for(n, params)` for list page n (1-based; the
    page number travels in the token as `p<n>-...`)."""

    def handle(conn, req) -> None:
        q = {k: v[0] for k, v in parse_qs(urlsplit(req.path).query).items()}
        if q.get("verb") == "Identify":
            return _send(conn, identify_xml(deleted="no"))
        tok = q.get("resumptionToken")
        n = int(re.match(r"p(\d+)", tok).group(1)) if tok else 1
        _send(conn, page_for(n, q))

    return RawServer(handle)


def oai_source(srv, **kw) -> SourceConfig:
    return SourceConfig(id="loop", url=srv.url("/oai"), start=today().replace(day=1),
                        http=HttpSettings(max_retries=0), **kw)


def _records_page(n: int, tok: str | None, size: int | None = None) -> bytes:
    recs = "".join(record(f"oai:x:{n}-{k}", STAMP) for k in range(3))
    attrs = {"completeListSize": str(size)} if size is not None else {}
    return envelope(f"<ListRecords>{recs}{token(tok, **attrs) if tok else ''}</ListRecords>", verb="ListRecords")


def test_a_token_growing_every_page_fails_cleanly_at_the_length_cap(db_path):
    # 1 KB more every page: the default cap (4 KB) stops it at page 4, memory never grows.
    def page(n, q):
        return _records_page(n, f"p{n + 1}-" + "x" * (1024 * n) if n < LAST_PAGE else None)

    with oai_server(page) as srv:
        with pytest.raises(BudgetExceeded) as err:
            harvest_window(oai_source(srv), WINDOW, db_path=db_path)
    assert err.value.guard == "token-too-long"
    text = str(err.value)
    assert "traversal.max_token_bytes = 4096" in text and "source=loop" in text
    assert len(srv.requests) == 1 + 4  # Identify, then pages 1-4
    with connect(db_path) as con:
        row = ledger.get_window(con, "loop", WINDOW.start)
    assert row.status == ledger.FAILED and "token-too-long" in row.error


def test_a_reconciliation_listing_whose_tokens_cycle_stops_at_repeated_token(db_path):
    # Page 1 -> token A (page 2) -> token B (page 3) -> token A again: each token differs from
    # the one before, so only a memory of every token seen catches the cycle. (Without the
    # guard the listing would go round until the server gives up after LAST_PAGE requests.)
    seen = []

    def page(n, q):
        seen.append(q.get("resumptionToken"))
        heads = "".join(header(f"oai:x:{n}-{k}", STAMP) for k in range(2))
        tok = token("p3-B" if n == 2 else "p2-A") if len(seen) < LAST_PAGE else ""
        return envelope(f"<ListIdentifiers>{heads}{tok}</ListIdentifiers>", verb="ListIdentifiers")

    with oai_server(page) as srv:
        with pytest.raises(HarvestError) as err:
            reconcile_source(oai_source(srv), db_path=db_path)
    text = str(err.value)
    assert "guard 'repeated-token'" in text and "p2-A" in text and "window=reconcile" in text
    assert seen == [None, "p2-A", "p3-B"]


def test_a_list_without_a_size_stops_at_the_page_budget(db_path):
    def page(n, q):
        return _records_page(n, f"p{n + 1}-t" if n < LAST_PAGE else None)

    with oai_server(page) as srv:
        with pytest.raises(BudgetExceeded) as err:
            harvest_window(oai_source(srv, traversal={"max_pages": 12}), WINDOW, db_path=db_path)
    assert err.value.guard == "page-limit"
    assert "traversal.max_pages = 12" in str(err.value) and "announced no size" in str(err.value)
    assert len(srv.requests) == 1 + 13


def test_a_slow_endless_list_stops_at_the_time_budget(db_path):
    def page(n, q):
        time.sleep(0.4)
        return _records_page(n, f"p{n + 1}-t" if n < LAST_PAGE else None)

    with oai_server(page) as srv:
        started = time.monotonic()
        with pytest.raises(BudgetExceeded) as err:
            harvest_window(oai_source(srv, traversal={"max_seconds": 2}), WINDOW, db_path=db_path)
        took = time.monotonic() - started
    assert err.value.guard == "time-limit" and "traversal.max_seconds" in str(err.value)
    assert took < 4 and len(srv.requests) < 10


def test_a_csw_catalogue_announcing_a_billion_records_is_bounded(db_path):
    def handle(conn, req) -> None:
        if req.method == "GET":
            return _send(conn, PYCSW_CAPS)
        body = req.body.decode()
        if 'resultType="hits"' in body:
            return _send(conn, results([], matched=0, next_record=0))
        start = int(re.search(r'startPosition="(\d+)"', body).group(1))
        size = int(re.search(r'maxRecords="(\d+)"', body).group(1))
        recs = [dc_record(f"r{i}", STAMP) for i in range(start, start + size)]
        _send(conn, results(recs, matched=10**9, next_record=start + size))

    with RawServer(handle) as srv:
        source = SourceConfig(id="huge", protocol="csw", url=srv.url("/csw"), start=today().replace(day=1),
                              http=HttpSettings(max_retries=0), csw={"page_size": 10},
                              traversal={"max_pages": 25})
        with pytest.raises(BudgetExceeded) as err:
            harvest_window(source, WINDOW, db_path=db_path)
    assert err.value.guard == "page-limit"
    text = str(err.value)
    assert "announced size of 1000000000" in text and "traversal.max_pages = 25" in text
    posts = [r for r in srv.requests if r.method == "POST"]
    assert len(posts) <= 2 + 26  # earliest-date probes, then 26 pages at most


def test_budget_from_the_announced_size_and_the_absolute_caps():
    limits = TraversalLimits(max_pages=1000, max_records=500)

    class P:
        def __init__(self, n, tok):
            self.records, self.quarantined, self.next_token, self.url = [object()] * n, [], tok, "u"

    b = TraversalBudget(limits)
    for i in range(1, 11):  # 10 per page, 20 announced: the budget is 2 * 20 / 10 + 10 = 14 pages
        b.check(P(10 if i <= 2 else 0, f"t{i}"), 20, i)
    with pytest.raises(BudgetExceeded, match="budget 14 pages"):
        for i in range(11, 16):
            b.check(P(0, f"t{i}"), 20, i)
    b = TraversalBudget(limits)
    with pytest.raises(BudgetExceeded) as err:
        for i in range(1, 100):
            b.check(P(10, f"t{i}"), None, i)
    assert err.value.guard == "record-limit" and b.received == 510


def test_an_absurdly_long_token_on_the_first_page_stops_the_window_before_it_is_sent(db_path):
    # A 1 MB token (inside a page well under the body cap): never sent back to the server, which
    # would refuse such a URL anyway; the error names the source, the window, the URL and the cap.
    with oai_server(lambda n, q: _records_page(n, "p2-" + "y" * 1_000_000)) as srv:
        with pytest.raises(BudgetExceeded) as err:
            harvest_window(oai_source(srv), WINDOW, db_path=db_path)
    text = str(err.value)
    assert err.value.guard == "token-too-long"
    assert "1000003 bytes" in text and "traversal.max_token_bytes = 4096" in text
    assert "source=loop" in text and f"window={WINDOW.key}" in text and srv.url("/oai") in text
    assert len(srv.requests) == 1 + 1  # Identify and page 1: the token was never followed
