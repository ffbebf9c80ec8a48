"""Scheduling jitter (rcunet.sync.jitter): where it runs, that a seed fixes each thread's
decisions, that point-specific hooks still win, and that it leaves nothing installed.

Counts are per thread: a background thread left by another test (a Host's timer, say) may
reach yield points while a Jitter is installed."""

from __future__ import annotations

import threading

import pytest

from rcunet.sync import hooks, lockdep
from rcunet.sync.hooks import yield_point
from rcunet.sync.jitter import Jitter, stress_seconds, stress_seeds
from rcunet.sync.lock import LockClass

ME = threading.current_thread().name  # pytest runs the tests in the main thread


def _decisions(seed: int, arrivals: int, thread_name: str) -> int:
    """Delays a thread named ``thread_name`` gets over ``arrivals`` yield points."""
    jitter = Jitter(seed, probability=0.5, max_spin_ns=0, nap_ns=0)
    with jitter:
        worker = threading.Thread(
            target=lambda: [yield_point("test.jitter") for _ in range(arrivals)],
            name=thread_name)
        worker.start()
        worker.join(10)
    assert jitter.arrivals(thread_name) == arrivals
    return jitter.perturbations(thread_name)


def test_every_yield_point_is_an_opportunity():
    with Jitter(1, probability=1.0, max_spin_ns=0, nap_ns=0) as jitter:
        for _ in range(7):
            yield_point("any.name.at.all")
    assert jitter.arrivals(ME) == 7
    assert jitter.perturbations(ME) == 7


def test_probability_zero_never_delays():
    with Jitter(1, probability=0.0) as jitter:
        for _ in range(50):
            yield_point("p")
    assert jitter.arrivals(ME) == 50 and jitter.perturbations(ME) == 0


def test_a_seed_fixes_each_threads_decisions():
    first = _decisions(7, 400, "worker-a")
    assert _decisions(7, 400, "worker-a") == first
    # Another seed, or another thread name, is another random stream.
    others = {_decisions(seed, 400, "worker-a") for seed in (8, 9, 10)}
    others.add(_decisions(7, 400, "worker-b"))
    assert others != {first}
    assert 100 < first < 300  # about half of 400 at probability 0.5


def test_instrumented_lock_acquisitions_are_yield_points():
    assert lockdep.enabled()  # the suite runs with lockdep: every Lock is instrumented
    lock = LockClass("jitter_test_lock").new()
    with Jitter(2, probability=1.0, max_spin_ns=0, nap_ns=0) as jitter:
        for _ in range(5):
            with lock:
                pass
    assert jitter.arrivals(ME) == 5


def test_a_point_specific_hook_wins_over_the_jitter():
    calls = []
    with Jitter(3, probability=1.0, max_spin_ns=0, nap_ns=0) as jitter:
        with hooks.installed({"named": lambda: calls.append("named")}):
            yield_point("named")
            yield_point("other")
    assert calls == ["named"]
    assert jitter.arrivals(ME) == 1  # only "other" reached the jitter


def test_leaves_nothing_installed_and_refuses_double_install():
    jitter = Jitter(4)
    with jitter:
        assert hooks.active_points() == {hooks.ANY_POINT}
        with pytest.raises(RuntimeError):
            jitter.__enter__()
    assert hooks.active_points() == frozenset()


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError):
        Jitter(0, probability=1.5)
    with pytest.raises(ValueError):
        Jitter(0, max_spin_ns=-1)


def test_environment_knobs(monkeypatch):
    monkeypatch.delenv("RCUNET_JITTER_SEEDS", raising=False)
    monkeypatch.delenv("RCUNET_STRESS_SECONDS", raising=False)
    assert stress_seeds() == [0, 1, 2, 3, 4]
    assert stress_seconds(0.25) == 0.25
    monkeypatch.setenv("RCUNET_JITTER_SEEDS", "8")
    monkeypatch.setenv("RCUNET_STRESS_SECONDS", "2.5")
    assert stress_seeds() == list(range(8))
    assert stress_seconds(0.25) == 2.5
    monkeypatch.setenv("RCUNET_JITTER_SEEDS", "0")
    with pytest.raises(ValueError):
        stress_seeds()
