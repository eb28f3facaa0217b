"""Background calls: results and errors in futures, threads reused, in-order calls kept in order."""

import threading
import time

import pytest

from harvest_pipeline.harvest import background
from harvest_pipeline.harvest.background import THREAD_NAME, InOrder


def _ours() -> set[int]:
    return {t.ident for t in threading.enumerate() if t.name == THREAD_NAME and t.is_alive()}


def test_a_call_gives_its_result_or_its_error_in_its_future():
    assert background.submit(lambda a, b=0: a + b, 2, b=3).result(timeout=5) == 5
    failed = background.submit(lambda: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        failed.result(timeout=5)


def test_calls_run_at_once_each_on_its_own_thread():
    both_in = threading.Barrier(2, timeout=5)  # each call waits for the other: they must overlap
    first = background.submit(both_in.wait)
    second = background.submit(both_in.wait)
    first.result(timeout=5), second.result(timeout=5)


def test_a_thread_that_finished_a_call_takes_the_next_instead_of_a_new_thread():
    background.submit(time.sleep, 0).result(timeout=5)
    time.sleep(0.05)  # the thread is idle again
    before = _ours()
    ran_on = [background.submit(threading.get_ident).result(timeout=5) for _ in range(20)]
    assert set(ran_on) <= before and _ours() == before


def test_idle_threads_end(monkeypatch):
    monkeypatch.setattr(background, "IDLE_SECONDS", 0.2)
    monkeypatch.setattr(background, "_threads", background._Threads())  # threads that read the short limit
    ident = background.submit(threading.get_ident).result(timeout=5)
    deadline = time.monotonic() + 5
    while ident in _ours() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ident not in _ours()
    assert background.submit(lambda: "still served").result(timeout=5) == "still served"


def test_in_order_calls_run_one_at_a_time_in_the_order_submitted():
    order, running, most = [], [0], [0]
    lock = threading.Lock()

    def call(n):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        time.sleep(0.01 if n % 2 else 0)  # a slow call does not let the next one overtake it
        order.append(n)
        with lock:
            running[0] -= 1
        return n

    calls = InOrder()
    futures = [calls.submit(call, n) for n in range(20)]
    calls.shutdown(wait=True)
    assert all(f.done() for f in futures)  # shutdown waited for every call
    assert order == list(range(20)) and most[0] == 1
    assert [f.result() for f in futures] == list(range(20))


def test_an_in_order_call_that_fails_does_not_stop_the_next():
    calls = InOrder()
    failed = calls.submit(lambda: 1 / 0)
    after = calls.submit(lambda: "next")
    calls.shutdown(wait=True)
    assert isinstance(failed.exception(), ZeroDivisionError) and after.result() == "next"
