"""rcunet.sync.atomic: cereggii's AtomicInt64 and the lock emulation behave alike, on the
operations and the 64-bit values the reference counts use."""

from __future__ import annotations

import threading

import pytest
from cereggii import AtomicInt64

from rcunet.sync import atomic
from rcunet.sync.atomic import LockedInt

WORDS = [AtomicInt64, LockedInt]


def test_cereggii_is_the_word_in_use():
    assert atomic.AtomicInt is AtomicInt64
    assert atomic.ATOMICS == "cereggii.AtomicInt64"


@pytest.mark.parametrize("word", WORDS, ids=["cereggii", "locked"])
def test_operations(word):
    a = word(0)
    assert a.increment_and_get(1) == 1
    assert a.increment_and_get(-1) == 0
    assert a.increment_and_get(-1) == -1  # rcuref's NOREF in the low 32 bits
    assert a.get() & 0xFFFF_FFFF == 0xFFFF_FFFF
    assert a.compare_and_set(-1, 0xE000_0000) is True
    assert a.compare_and_set(-1, 0) is False
    assert a.get() == 0xE000_0000
    a.set(0xA000_0000)
    assert a.get() == 0xA000_0000


@pytest.mark.parametrize("word", WORDS, ids=["cereggii", "locked"])
def test_concurrent_adds_lose_nothing(word):
    a = word(0)
    n, threads = 20_000, 4

    def work():
        for _ in range(n):
            a.increment_and_get(1)
            a.increment_and_get(-1)
            a.increment_and_get(1)

    workers = [threading.Thread(target=work) for _ in range(threads)]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    assert a.get() == n * threads
