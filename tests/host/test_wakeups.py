"""Wake-ups deferred to the end of a receive batch (rcunet/host/wakeups.py)."""

from __future__ import annotations

import threading

import pytest

from rcunet.host.wakeups import deferred, open_gates


def closed_gate() -> threading.Lock:
    gate = threading.Lock()
    gate.acquire()
    return gate


def test_outside_a_batch_a_gate_opens_at_once() -> None:
    gate = closed_gate()
    open_gates([gate])
    assert not gate.locked()


def test_a_batch_opens_its_gates_when_the_outermost_block_ends() -> None:
    first, second = closed_gate(), closed_gate()
    with deferred():
        open_gates([first])
        with deferred():
            open_gates([second])
        assert first.locked() and second.locked()  # the inner block opens nothing
    assert not first.locked() and not second.locked()
    after = closed_gate()
    open_gates([after])  # the batch is over: at once again
    assert not after.locked()


def test_another_thread_opens_its_gates_at_once_during_a_batch() -> None:
    gate = closed_gate()
    with deferred():
        waker = threading.Thread(target=open_gates, args=([gate],))
        waker.start()
        waker.join()
        assert not gate.locked()


def test_a_batch_that_raises_still_opens_its_gates() -> None:
    gate = closed_gate()
    with pytest.raises(RuntimeError), deferred():
        open_gates([gate])
        raise RuntimeError("receive path bug")
    assert not gate.locked()
    later = closed_gate()
    open_gates([later])
    assert not later.locked()
