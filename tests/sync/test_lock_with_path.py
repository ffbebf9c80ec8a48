"""``with lock:`` in fast mode runs no Python frame (compiled: Lock's methods are C;
interpreted: the raw lock's own methods), and every way of entering a lock still honours
the mode: lock_stat and lockdep see the acquisitions once switched on, and a caller that
goes through the class (``type(lock).__enter__(lock)``, as mypyc-compiled code does)
works in both modes."""

from __future__ import annotations

import sys
import threading
from collections.abc import Callable

import pytest

from rcunet.sync import lockdep, lockstat
from rcunet.sync.lock import LockClass


@pytest.fixture
def fast_mode():
    """Neither lock_stat nor lockdep (the suite runs with lockdep on)."""
    lockdep.disable()
    assert not lockstat.enabled() and not lockdep.enabled()
    yield
    lockdep.enable()


def _python_calls(fn: Callable[[], object]) -> list[str]:
    """The Python functions ``fn`` ran (its own frame excluded)."""
    calls: list[str] = []

    def profile(frame, event, arg):  # noqa: ANN001 - sys.setprofile's signature
        if event == "call":
            calls.append(frame.f_code.co_qualname)

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return [name for name in calls if name != fn.__qualname__]


def test_with_in_fast_mode_runs_no_python_frame(fast_mode):
    lk = LockClass("t_with_fast").new()

    def enter_and_leave() -> None:
        with lk:
            pass

    assert _python_calls(enter_and_leave) == []
    assert not lk.locked()


def test_with_through_the_class_works_in_both_modes(fast_mode):
    lk = LockClass("t_with_class").new()
    cls = type(lk)
    assert cls.__enter__(lk) is True
    assert lk.locked()
    cls.__exit__(lk, None, None, None)
    assert not lk.locked()
    lockstat.enable()
    try:
        assert cls.__enter__(lk) is True
        assert lk.locked()
        cls.__exit__(lk, None, None, None)
        assert not lk.locked()
        assert lockstat.snapshot([lk.lock_class])["t_with_class"].acquisitions == 1
    finally:
        lockstat.disable()


def test_the_mode_switch_reaches_a_lock_made_before_it(fast_mode):
    lk = LockClass("t_with_switch").new()
    with lk:  # fast mode: nothing recorded
        pass
    lockstat.enable()
    try:
        with lk:
            pass
        with lk:
            pass
        assert lockstat.snapshot([lk.lock_class])["t_with_switch"].acquisitions == 2
    finally:
        lockstat.disable()
    with lk:  # fast again: the count stays
        pass
    lockstat.enable()
    try:
        assert lockstat.snapshot([lk.lock_class])["t_with_switch"].acquisitions == 2
    finally:
        lockstat.disable()


def test_lockdep_names_the_with_statement_as_the_site():
    lk = LockClass("t_with_site").new()
    assert lockdep.enabled()
    with lk:
        held = list(lockdep._stack())  # this thread's held locks, with their sites
        line = sys._getframe().f_lineno - 2
    assert len(held) == 1
    assert held[0].site.endswith(f":{line}")
    assert "test_lockdep_names_the_with_statement_as_the_site" in held[0].site


def test_a_condition_over_a_lock_works_in_fast_mode(fast_mode):
    lk = LockClass("t_with_cond").new()
    cond = threading.Condition(lk)
    ready: list[int] = []

    def producer() -> None:
        with cond:
            ready.append(1)
            cond.notify()

    with cond:
        worker = threading.Thread(target=producer)
        worker.start()
        assert cond.wait_for(lambda: ready, timeout=30)
    worker.join(30)
    assert not worker.is_alive()
    assert not lk.locked()


@pytest.mark.parametrize("instrumented", [False, True])
def test_an_exception_in_the_block_releases_the_lock(instrumented):
    lk = LockClass(f"t_with_exc_{int(instrumented)}").new()
    if not instrumented:
        lockdep.disable()
    try:
        with pytest.raises(KeyError):
            with lk:
                raise KeyError("x")
    finally:
        lockdep.enable()
    assert not lk.locked()
