"""LockArray: per-bucket locks made on first use, one lock per slot whatever the race."""

from __future__ import annotations

import threading

import pytest

from rcunet.sync import lockstat
from rcunet.sync.lock import Lock, LockClass
from rcunet.sync.lockarray import LockArray

TEST_LOCK = LockClass("test_lockarray_lock")


def test_slots_start_empty_and_fill_on_first_use():
    locks = LockArray(TEST_LOCK, 8)
    assert len(locks) == 8 and locks.created() == 0
    assert locks[3] is None
    lock = locks[3] or locks.create(3)
    assert isinstance(lock, Lock) and lock.lock_class is TEST_LOCK
    assert locks[3] is lock and locks.get(3) is lock and locks.create(3) is lock
    assert locks.created() == 1


def test_a_lazily_made_lock_works_and_is_counted_by_lock_stat():
    locks = LockArray(TEST_LOCK, 4)
    with lockstat.collecting():
        with locks.get(1):
            assert locks[1].locked()
        snap = lockstat.snapshot([TEST_LOCK])
    assert not locks[1].locked()
    assert snap["test_lockarray_lock"].acquisitions >= 1


def test_racing_first_users_get_the_same_lock():
    locks = LockArray(TEST_LOCK, 64)
    got: list[list[Lock]] = [[] for _ in range(4)]
    start = threading.Barrier(4)

    def worker(out: list[Lock]) -> None:
        start.wait()
        for i in range(64):
            out.append(locks[i] or locks.create(i))

    threads = [threading.Thread(target=worker, args=(out,)) for out in got]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(64):
        assert len({id(out[i]) for out in got}) == 1
        assert got[0][i] is locks[i]
    assert locks.created() == 64


def test_negative_size_is_refused():
    with pytest.raises(ValueError):
        LockArray(TEST_LOCK, -1)
