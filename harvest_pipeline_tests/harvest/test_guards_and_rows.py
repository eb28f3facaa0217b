"""Pagination guards and the per-page row builder, from hand-made pages (no server)."""

from datetime import datetime, timedelta, timezone

import pytest
from lxml import etree

from harvest_pipeline.errors import ProtocolError
from harvest_pipeline.harvest.rows import page_rows
from harvest_pipeline.harvest.window import _Guards
from harvest_pipeline.pages import HarvestedRecord, ListPage, ResumptionInfo

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)


def _page(ids, token, *, cursor=None, size=None, n=1, metadata=None):
    records = [
        HarvestedRecord(i, "2026-11-01T01:00:00Z", T0.replace(hour=1), ("s",), False,
                        etree.tostring(metadata).decode() if metadata is not None else None, metadata)
        for i in ids
    ]
    return ListPage("http://x/oai", {}, None, records, ResumptionInfo(token, size, cursor), n)


def test_count_overflow_guard_names_itself():
    g = _Guards(0)
    with pytest.raises(ProtocolError, match="guard 'count-overflow'"):
        for n in range(1, 100):
            g.check(_page([f"id{n}-{k}" for k in range(50)], f"t{n}", n=n), 10, n)


def test_page_limit_guard_names_itself():
    g = _Guards(0)
    with pytest.raises(ProtocolError, match="guard 'page-limit'"):
        for n in range(1, 100):
            g.check(_page([], f"t{n}", n=n), 5, n)  # empty pages forever


def test_wrong_cursor_is_a_warning_once():
    g = _Guards(0)
    assert g.check(_page(["a", "b"], "t1", cursor=0), 6, 1) == []
    [warning] = g.check(_page(["c", "d"], "t2", cursor=1), 6, 2)  # a page number, not an offset
    assert "cursor" in warning
    assert g.check(_page(["e", "f"], "t3", cursor=2), 6, 3) == []


def test_unmappable_metadata_is_stored_raw_and_quarantined_as_map():
    weird = etree.fromstring("<thing xmlns='urn:nobody-maps-this'><x>1</x></thing>")
    page = _page(["a"], None, metadata=weird)
    table, quarantined = page_rows(page, metadata_prefix="odd", window_start=T0, window_end=T0.replace(day=2))
    row = table.to_pylist()[0]
    assert row["metadata_xml"].startswith("<thing") and row["title"] is None and "urn:nobody-maps-this" in row["mapping_error"]
    [(page_number, ident, kind, error, raw)] = quarantined
    assert (page_number, ident, kind) == (1, "a", "map") and raw.startswith(b"<thing")


def test_a_restart_after_the_whole_list_ends_it_and_drops_the_repeats():
    g = _Guards(0)
    assert g.check(_page(["a", "b"], "t1", size=4), 4, 1) == []
    assert g.check(_page(["c", "d"], "t2", size=4, n=2), 4, 2) == []
    restart = _page(["a", "b"], "t3", size=4, n=3)
    [warning] = g.check(restart, 4, 3)
    assert "started the list again" in warning and "all 4 record(s)" in warning
    assert restart.records == [] and restart.next_token is None and g.list_ended
    assert g.learned == {"final-token-restarts-list"}


def test_a_restart_before_the_end_still_stops_at_the_guard_even_after_a_resume():
    g = _Guards(2, first_identifier="a")  # resumed after page 1 (a, b): the staging file knows "a"
    with pytest.raises(ProtocolError, match="guard 'list-restarted'.*after 2 record.*of completeListSize 6"):
        g.check(_page(["a", "b"], "t2", size=6, n=2), 6, 2)


def test_a_ledger_that_cannot_take_the_failure_is_logged_not_hidden(caplog):
    from contextlib import contextmanager

    from harvest_pipeline.errors import StoreLockedError
    from harvest_pipeline.harvest.window import Window, _record_failure
    from harvest_pipeline.sources import SourceConfig

    @contextmanager
    def locked():
        raise StoreLockedError("catalogue data/harvest.duckdb is locked", hint="wait")
        yield

    window = Window(T0, T0 + timedelta(days=1), "2026-11-01")
    source = SourceConfig(id="demo", url="http://127.0.0.1:9/oai")
    with caplog.at_level("WARNING", logger="harvest_pipeline.harvest.window"):
        _record_failure(locked, source, window, RuntimeError("the page loop broke"))
    assert "source demo, window 2026-11-01: could not mark the window failed" in caplog.text
    assert "StoreLockedError" in caplog.text and "is locked" in caplog.text

    @contextmanager
    def broken():
        raise TypeError("a bug in the ledger code")
        yield

    with pytest.raises(TypeError):  # a bug is not a store failure: it is not swallowed
        _record_failure(broken, source, window, RuntimeError("the page loop broke"))
