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

    for item in prefetch(endless(), depth=2):
        if item == 5:
            break
    assert not any(t.name == "page-prefetch" and t.is_alive() for t in threading.enumerate())
    assert len(produced) <= 5 + 1 + 2 + 1  # at most depth (+ one in hand) beyond what was used
