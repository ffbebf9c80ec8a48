"""Spinning before sleeping (rcunet/sync/spin.py): a spin ends with what its check found,
at its time, or as soon as other tasks take its CPU, and then no thread spins for a
while."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from rcunet.sync import spin
from rcunet.sync.spin import calm_until, spin_until


@pytest.mark.usefixtures("unguarded_spin")
def test_a_spin_returns_what_its_check_finds_as_soon_as_it_finds_it() -> None:
    calls = []

    def ready() -> str:
        calls.append(1)
        return "frame" if len(calls) == 3 else ""

    assert spin_until(ready, 600.0) == "frame"
    assert len(calls) == 3


@pytest.mark.usefixtures("unguarded_spin")
def test_a_spin_ends_at_its_time_with_the_last_result() -> None:
    started = time.monotonic()
    assert spin_until(lambda: 0, 0.02) == 0
    assert time.monotonic() - started >= 0.02


def test_a_spin_that_loses_its_cpu_to_another_task_ends_and_backs_off(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy process on this thread's only CPU: its time slice is time the spin lost
    (STOLEN_LIMIT), so the spin ends long before its 600 s and turns spinning off for
    BACK_OFF."""
    monkeypatch.setattr(spin, "GUARD", True)  # the default, whatever the environment
    monkeypatch.setattr(spin, "_calm_until", 0.0)  # no back-off from an earlier spin
    cpu = min(os.sched_getaffinity(0))
    allowed = os.sched_getaffinity(0)
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                           preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    try:
        os.sched_setaffinity(0, {cpu})  # this thread only
        started = time.monotonic()
        assert spin_until(lambda: False, 600.0) is False
        assert time.monotonic() - started < 120
        assert calm_until() > started
        assert calm_until() <= time.monotonic() + spin.BACK_OFF
    finally:
        os.sched_setaffinity(0, allowed)
        hog.kill()
        hog.wait()
