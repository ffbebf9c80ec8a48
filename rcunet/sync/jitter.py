"""Seeded scheduling jitter for stress runs: perturb thread interleavings at every yield
point, from a random source the test chooses.

A stress test reaches only the interleavings the OS scheduler happens to produce, and on
an idle machine it produces much the same ones every run.  ``Jitter(seed)`` installs a
hook at every yield point (``hooks.ANY_POINT``: the named points of the tables and
primitives, and ``lock.acquire`` before every instrumented lock acquisition).  A thread
arriving there draws from its own ``random.Random`` (seeded with the jitter seed and the
thread's name) and, with probability ``probability``, gives up the CPU (``sleep(0)``),
spins for up to ``max_spin_ns``, or now and then sleeps ``nap_ns`` so the OS scheduler
can run someone else in the window.  A different seed gives a different set of
perturbations, so a test parametrized over seeds explores different schedules; the seed
in the test id names the run to repeat.  (Scheduling stays the OS's: a seed reproduces
each thread's decisions, not the whole interleaving.)

Usage::

    with Jitter(seed=3) as jitter:
        run_threads(...)
    assert jitter.arrivals() > 0  # the code under test reached yield points

``stress_seeds()`` and ``stress_seconds()`` read the environment knobs the stress tests
share: ``RCUNET_JITTER_SEEDS`` (how many seeds, default 5) and ``RCUNET_STRESS_SECONDS``
(seconds per seed, each test has its own default).
"""

from __future__ import annotations

import os
import random
import threading
import time
from contextlib import AbstractContextManager

from rcunet.sync import hooks

DEFAULT_PROBABILITY = 0.05
DEFAULT_MAX_SPIN_NS = 20_000
DEFAULT_NAP_NS = 50_000
#: Share of the perturbations that sleep ``nap_ns`` instead of yielding or spinning.
NAP_SHARE = 0.1
DEFAULT_SEEDS = 5


class _ThreadState:
    """One thread's random source and counts.  owner: that thread (the counts are read by
    ``arrivals()``/``perturbations()``: one attribute load of an int the owner stores)."""

    __slots__ = ("name", "rng", "arrivals", "delays")

    def __init__(self, name: str, rng: random.Random) -> None:
        self.name = name  # immutable
        self.rng = rng
        self.arrivals = 0
        self.delays = 0


class Jitter:
    """Random delays at every yield point while installed (a context manager).

    Concurrency:
      per thread  each thread has its own ``_ThreadState`` (a ``threading.local``), so a
                  hook takes no lock and shares no random state.
      _states     every thread's state, appended under ``_lock`` (once per thread) so
                  ``perturbations()`` can sum them.
    """

    def __init__(self, seed: int, *, probability: float = DEFAULT_PROBABILITY,
                 max_spin_ns: int = DEFAULT_MAX_SPIN_NS, nap_ns: int = DEFAULT_NAP_NS) -> None:
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {probability!r}")
        if max_spin_ns < 0 or nap_ns < 0:
            raise ValueError("spin and nap durations must be >= 0")
        self.seed = seed
        self.probability = probability
        self.max_spin_ns = max_spin_ns
        self.nap_ns = nap_ns
        self._local = threading.local()
        self._lock = threading.Lock()
        self._states: list[_ThreadState] = []  # guarded-by: _lock
        self._installed: AbstractContextManager[None] | None = None

    def __repr__(self) -> str:
        return f"Jitter(seed={self.seed}, probability={self.probability})"

    # -- the hook ----------------------------------------------------------------------
    def _state(self) -> _ThreadState:
        state: _ThreadState | None = getattr(self._local, "state", None)
        if state is None:
            name = threading.current_thread().name
            state = _ThreadState(name, random.Random(f"{self.seed}/{name}"))
            self._local.state = state
            with self._lock:
                self._states.append(state)
        return state

    def perturb(self) -> None:
        """The hook: maybe yield, spin or nap (decided by this thread's random source)."""
        state = self._state()
        state.arrivals += 1  # owner: this thread only
        rng = state.rng
        if rng.random() >= self.probability:
            return
        state.delays += 1  # owner: this thread only
        roll = rng.random()
        if roll < NAP_SHARE:
            time.sleep(self.nap_ns / 1e9)
        elif roll < (1 + NAP_SHARE) / 2:
            time.sleep(0)  # give the CPU (and, with a GIL, the GIL) away
        else:
            _spin(rng.randrange(self.max_spin_ns + 1))

    def arrivals(self, thread: str | None = None) -> int:
        """How many times a thread reached a yield point so far (all threads, or the
        threads named ``thread``)."""
        return sum(state.arrivals for state in self._snapshot(thread))

    def perturbations(self, thread: str | None = None) -> int:
        """How many times a thread was delayed so far (all threads, or those named
        ``thread``)."""
        return sum(state.delays for state in self._snapshot(thread))

    def _snapshot(self, thread: str | None) -> list[_ThreadState]:
        with self._lock:
            states = list(self._states)
        return [s for s in states if thread is None or s.name == thread]

    # -- installation ------------------------------------------------------------------
    def __enter__(self) -> Jitter:
        if self._installed is not None:
            raise RuntimeError("this Jitter is already installed")
        installed = hooks.installed({hooks.ANY_POINT: self.perturb})
        installed.__enter__()
        self._installed = installed
        return self

    def __exit__(self, *exc: object) -> None:
        installed, self._installed = self._installed, None
        if installed is not None:
            installed.__exit__(None, None, None)


def _spin(ns: int) -> None:
    """Busy-wait ``ns`` nanoseconds (keeps the CPU, unlike a sleep: the other threads
    run on, in parallel without the GIL, while this one is late)."""
    end_at = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end_at:
        pass


def stress_seeds(default: int = DEFAULT_SEEDS) -> list[int]:
    """The jitter seeds a stress test runs with: ``0 .. N-1`` where N comes from
    ``RCUNET_JITTER_SEEDS`` (default 5)."""
    count = int(os.environ.get("RCUNET_JITTER_SEEDS", str(default)))
    if count < 1:
        raise ValueError(f"RCUNET_JITTER_SEEDS must be >= 1, got {count}")
    return list(range(count))


def stress_seconds(default: float) -> float:
    """Seconds per stress run (per seed): ``RCUNET_STRESS_SECONDS`` or ``default``."""
    return float(os.environ.get("RCUNET_STRESS_SECONDS", str(default)))

