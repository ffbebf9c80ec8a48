"""Helpers for the socket-table tests: small tables, a seeded RNG and a hand-driven
clock, so every candidate order and bucket placement replays exactly.  (A uniquely named
module, not conftest, so test modules can import it without clashing with other dirs.)"""

from __future__ import annotations

import random

from rcunet.tables import AF_INET, AF_INET6, SockEntry, TcpHashInfo
from rcunet.tuning import Tuning

L4 = bytes([10, 0, 0, 1])
L4B = bytes([10, 0, 0, 9])
D4 = bytes([10, 0, 0, 2])
LO4 = bytes([127, 0, 0, 1])
ANY4 = bytes(4)
ANY6 = bytes(16)
L6 = bytes.fromhex("fd000000000000000000000000000001")
D6 = bytes.fromhex("fd000000000000000000000000000002")


def mapped(addr4: bytes) -> bytes:
    return bytes(10) + b"\xff\xff" + addr4


class FakeClock:
    """int nanoseconds that only move when the test says so."""

    def __init__(self, now: int = 100 * 1_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now

    def advance_ms(self, ms: int) -> None:
        self.now += ms * 1_000_000


def make_tables(seed: int = 1, clock: FakeClock | None = None, **tuning: object) -> TcpHashInfo:
    return TcpHashInfo(
        Tuning(**tuning),  # type: ignore[arg-type]
        rng=random.Random(seed),
        clock=clock or FakeClock(),
        ehash_size=256,
        bhash_size=64,
        lhash2_size=16,
        ncpus=2,
    )


def sock(laddr: bytes = L4, family: int | None = None, **kw: object) -> SockEntry:
    if family is None:
        family = AF_INET if len(laddr) == 4 else AF_INET6
    return SockEntry(family, laddr, **kw)  # type: ignore[arg-type]

