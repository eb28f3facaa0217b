"""The page prefetcher keeps order, surfaces errors in sequence, and stops its worker."""

import threading

import pytest

from harvest_pipeline.harvest.prefetch import prefetch


def test_order_is_kept():
    assert list(prefetch(iter(range(100)), depth=3)) == list(range(100))


def test_an_error_arrives_after_the_items_before_it():
    def pages():
        yield 1
        yield 2
        raise ValueError("page 3 broke")

    got = []
    with pytest.raises(ValueError, match="page 3 broke"):
        for item in prefetch(pages()):
            got.append(item)
    assert got == [1, 2]


def test_stopping_early_stops_the_worker():
    produced = []

    def endless():
        n = 0
        while True:
            produced.append(n)
            yield n
            n += 1

    pages = endless()
    for item in prefetch(pages, depth=2):
        if item == 5:
            break
    # The worker has closed the iterator and asks for nothing more.
    assert pages.gi_frame is None
    assert len(produced) <= 5 + 1 + 2 + 1  # at most depth (+ one in hand) beyond what was used


def test_next_ready_waits_for_the_next_item_only_as_long_as_asked():
    import time

    from harvest_pipeline.harvest.prefetch import Prefetch

    gate = threading.Event()

    def slow():
        gate.wait(5)
        yield "page"

    items = Prefetch(slow())
    t0 = time.monotonic()
    assert items.next_ready(timeout=0.2) is False
    assert 0.15 <= time.monotonic() - t0 < 2
    gate.set()
    assert items.next_ready(timeout=5) is True
    assert list(items) == ["page"]


def test_fetch_ahead_asks_for_a_page_only_when_told_and_in_order():
    from harvest_pipeline.harvest.prefetch import FetchAhead

    from harvest_pipeline.harvest.background import THREAD_NAME

    asked = []

    def pages():
        for n in (1, 2, 3):
            asked.append((n, threading.current_thread().name))
            if n == 3:
                raise ValueError("page 3 broke")
            yield n

    with FetchAhead(pages()) as ahead:
        assert ahead.next() == 1 and asked == [(1, threading.current_thread().name)]  # in this thread, on demand
        ahead.request_next()
        assert ahead.next() == 2
        assert asked[1][1] == THREAD_NAME  # page 2 was asked for in a background thread
        assert [n for n, _ in asked] == [1, 2]  # nothing beyond what was asked for
        ahead.request_next()
        with pytest.raises(ValueError, match="page 3 broke"):  # raised where page 3 comes
            ahead.next()


def test_closing_fetch_ahead_waits_for_the_request_in_flight():
    import time

    from harvest_pipeline.harvest.prefetch import FetchAhead

    answered = []

    def pages():
        yield 1
        time.sleep(0.3)  # the server takes its time with page 2
        answered.append(2)
        yield 2

    with FetchAhead(pages()) as ahead:
        assert ahead.next() == 1
        ahead.request_next()
    assert answered == [2]  # no request outlives the traversal
