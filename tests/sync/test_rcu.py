"""Epoch-based RCU.

Covered: synchronize waits for a reader that began before it and not for one that began
after it (both forced with events, no sleeps); nested sections end at the outermost unlock,
whichever entry point (``section().enter/exit``, ``read_lock``, ``with read()``) opened them;
call_rcu callbacks never run before a grace period has completed and run after barrier();
misuse (unlock without lock, synchronize inside a read section) raises RcuError; timeouts
bound every wait.
"""

from __future__ import annotations

import threading

import pytest

from rcunet.sync.hooks import Schedule
from rcunet.sync.rcu import SYNC_AFTER_EPOCH, Rcu, RcuError

JOIN_S = 5.0


class Reader:
    """A thread that sits in a read section until told to leave."""

    def __init__(self, rcu: Rcu, name: str) -> None:
        self.rcu = rcu
        self.inside = threading.Event()
        self.leave = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name)
        self.thread.start()
        assert self.inside.wait(JOIN_S)

    def _run(self) -> None:
        with self.rcu.read():
            self.inside.set()
            self.leave.wait(JOIN_S)

    def finish(self) -> None:
        self.leave.set()
        self.thread.join(JOIN_S)
        assert not self.thread.is_alive()


def test_synchronize_waits_for_an_old_reader():
    rcu = Rcu("t_old")
    reader = Reader(rcu, "old-reader")
    assert rcu.readers_blocking() == ["old-reader"]
    assert rcu.synchronize(timeout=0.05) is False  # the reader is still inside
    reader.finish()
    assert rcu.synchronize(timeout=JOIN_S) is True
    assert rcu.readers_blocking() == []


def test_synchronize_does_not_wait_for_a_reader_that_began_after_it():
    rcu = Rcu("t_new")
    old = Reader(rcu, "old")
    done = threading.Event()
    with Schedule() as sched:
        sched.pause_at(SYNC_AFTER_EPOCH, thread="syncer")
        syncer = threading.Thread(
            target=lambda: rcu.synchronize(timeout=JOIN_S) and done.set(), name="syncer"
        )
        syncer.start()
        sched.wait_paused()  # the grace period has started (new epoch published)
        new = Reader(rcu, "new")  # enters after that
        sched.release()
        old.finish()
        syncer.join(JOIN_S)
    assert done.is_set(), "synchronize waited for a reader that began after it"
    new.finish()


def test_nested_sections_end_at_the_outermost_unlock():
    rcu = Rcu("t_nest")
    inner_left = threading.Event()
    leave = threading.Event()

    def nested():
        rcu.read_lock()
        rcu.read_lock()
        rcu.read_unlock()
        inner_left.set()
        leave.wait(JOIN_S)
        rcu.read_unlock()

    t = threading.Thread(target=nested)
    t.start()
    assert inner_left.wait(JOIN_S)
    assert rcu.synchronize(timeout=0.05) is False  # still inside the outer section
    leave.set()
    t.join(JOIN_S)
    assert rcu.synchronize(timeout=JOIN_S)


def test_the_section_api_and_read_lock_are_one_section():
    """A hot path's ``section().enter()`` and a ``read_lock()`` in the same thread nest in
    one section: the grace period waits until the last of them has left."""
    rcu = Rcu("t_section")
    steps = [threading.Event() for _ in range(3)]
    leave = [threading.Event() for _ in range(2)]

    def reader():
        section = rcu.section()
        assert section is rcu.section() and section is rcu.read()
        section.enter()
        rcu.read_lock()
        steps[0].set()
        leave[0].wait(JOIN_S)
        section.exit()  # the inner one: still inside
        steps[1].set()
        leave[1].wait(JOIN_S)
        rcu.read_unlock()
        steps[2].set()

    t = threading.Thread(target=reader)
    t.start()
    assert steps[0].wait(JOIN_S)
    assert rcu.synchronize(timeout=0.05) is False
    leave[0].set()
    assert steps[1].wait(JOIN_S)
    assert rcu.synchronize(timeout=0.05) is False
    leave[1].set()
    assert steps[2].wait(JOIN_S)
    t.join(JOIN_S)
    assert rcu.synchronize(timeout=JOIN_S)


def test_call_rcu_runs_only_after_a_grace_period():
    rcu = Rcu("t_cb")
    reader = Reader(rcu, "holder")
    ran = []
    rcu.call_rcu(lambda: ran.append("freed"))
    assert rcu.pending() == 1
    assert rcu.poll() == 0
    assert rcu.barrier(timeout=0.05) is False
    assert ran == []
    reader.finish()
    assert rcu.barrier(timeout=JOIN_S) is True
    assert ran == ["freed"] and rcu.pending() == 0


def test_call_rcu_waits_for_a_grace_period_that_started_after_it():
    rcu = Rcu("t_cb2")
    ran = []
    rcu.synchronize()  # completes epoch N; the callback must not ride on it
    rcu.call_rcu(lambda: ran.append(1))
    assert rcu.poll() == 0
    rcu.synchronize()
    rcu.synchronize()
    assert ran == [1]


def test_misuse_raises():
    rcu = Rcu("t_misuse")
    with pytest.raises(RcuError):
        rcu.read_unlock()
    with pytest.raises(RcuError):
        rcu.section().exit()
    with rcu.read():
        with pytest.raises(RcuError):
            rcu.synchronize()
    assert not rcu.in_read_section()


def test_no_readers_means_immediate_grace_period():
    rcu = Rcu("t_idle")
    assert rcu.synchronize(timeout=JOIN_S)
    assert rcu.grace_periods == 1
