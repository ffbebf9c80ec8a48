"""Scheduling hooks: yield points run installed hooks, nest and restore; a Schedule parks a
named thread at a named point until released; every wait is bounded (a schedule that cannot
make progress fails with ScheduleTimeout in seconds instead of hanging)."""

from __future__ import annotations

import threading
import time

import pytest

from rcunet.sync import hooks
from rcunet.sync.hooks import Schedule, ScheduleTimeout, yield_point


def test_yield_point_without_hooks_is_a_no_op():
    assert hooks.active_points() == frozenset()
    yield_point("nothing.here")


def test_installed_hooks_run_nest_and_restore():
    calls = []
    with hooks.installed({"p": lambda: calls.append("outer")}):
        yield_point("p")
        with hooks.installed({"p": lambda: calls.append("inner"), "q": lambda: calls.append("q")}):
            yield_point("p")
            yield_point("q")
        yield_point("p")
        yield_point("q")
    yield_point("p")
    assert calls == ["outer", "inner", "q", "outer"]
    assert hooks.active_points() == frozenset()


def test_schedule_pauses_only_the_named_thread():
    order = []

    def work(tag):
        order.append(f"{tag}:before")
        yield_point("s.point")
        order.append(f"{tag}:after")

    with Schedule(timeout=5) as sched:
        sched.pause_at("s.point", thread="target")
        other = threading.Thread(target=work, args=("other",), name="other")
        other.start()
        other.join(5)
        target = threading.Thread(target=work, args=("target",), name="target")
        target.start()
        sched.wait_paused()
        assert order == ["other:before", "other:after", "target:before"]
        assert sched.paused() == 1
        assert sched.release() == 1
        target.join(5)
        assert sched.passed("s.point") == 2
    assert order[-1] == "target:after"
    assert hooks.active_points() == frozenset()


def test_wait_paused_times_out_instead_of_hanging():
    with Schedule(timeout=0.05) as sched:
        sched.pause_at("never.reached")
        started = time.monotonic()
        with pytest.raises(ScheduleTimeout):
            sched.wait_paused()
        assert time.monotonic() - started < 2


def test_unreleased_thread_continues_and_schedule_reports_it():
    sched = Schedule(timeout=0.05)
    sched.pause_at("forgotten")
    t = threading.Thread(target=yield_point, args=("forgotten",), name="stuck")
    t.start()
    t.join(5)
    assert not t.is_alive()
    with pytest.raises(ScheduleTimeout, match="not released"):
        sched.__exit__(None, None, None)


def test_closing_releases_parked_threads():
    with Schedule(timeout=5) as sched:
        sched.pause_at("parked", count=2)
        threads = [threading.Thread(target=yield_point, args=("parked",)) for _ in range(2)]
        for t in threads:
            t.start()
        sched.wait_paused(count=2)
    for t in threads:
        t.join(5)
        assert not t.is_alive()


def test_wait_until_is_bounded():
    with pytest.raises(ScheduleTimeout):
        hooks.wait_until(lambda: False, timeout=0.02, what="never")
    hooks.wait_until(lambda: True)


def test_pause_point_must_be_named_when_ambiguous():
    with Schedule() as sched:
        sched.pause_at("a")
        sched.pause_at("b")
        with pytest.raises(ValueError):
            sched.release()
        with pytest.raises(ValueError):
            sched.pause_at("c", count=0)
