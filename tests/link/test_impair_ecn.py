"""Impairments that signal congestion with CE instead of a drop: ``ecn=N%`` and the
rate limiter's ``ce_threshold`` step (an L4S / DCTCP style queue); only ECT packets are
marked, Not-ECT ones are dropped; the --impair parser; a link delivers marked frames."""

from __future__ import annotations

import math

from rcunet.cmd.run_common import parse_impairment
from rcunet.link.ecnmark import codepoint
from rcunet.link.impair import MS, Impairment, ImpairmentConfig
from rcunet.link.memory import KIND_IP, PointToPoint
from rcunet.wire import ecn, ipv4

A4, B4 = bytes((10, 0, 0, 1)), bytes((10, 0, 0, 2))
N = 10_000


def packet(ecn_field: int, ident: int = 0, size: int = 100) -> bytes:
    return ipv4.Repr(A4, B4, 17, bytes(size), ident=ident & 0xFFFF, ecn=ecn_field).build()


def within(count: int, p: float, n: int = N, sigmas: float = 5.0) -> bool:
    return abs(count - n * p) <= sigmas * math.sqrt(n * p * (1 - p))


def test_random_marking_marks_ect_and_drops_not_ect() -> None:
    imp = Impairment(ecn=0.05, seed=3, ethernet=False)
    out = [f for i in range(N) for f in imp.submit(packet(ecn.ECT_0, i), 0)]
    assert len(out) == N  # nothing lost
    marked = sum(codepoint(f, False) == ecn.CE for f in out)
    assert marked == imp.counters["ce_marked"] and within(marked, 0.05)
    assert all(ipv4.Repr.parse(f, verify=True).checksum_ok for f in out)
    plain = Impairment(ecn=0.05, seed=3, ethernet=False)
    kept = [f for i in range(N) for f in plain.submit(packet(ecn.NOT_ECT, i), 0)]
    assert N - len(kept) == plain.counters["ecn_dropped"]
    assert within(plain.counters["ecn_dropped"], 0.05)
    assert all(codepoint(f, False) == ecn.NOT_ECT for f in kept)


def test_non_ip_frames_pass_unmarked() -> None:
    imp = Impairment(ecn=1.0, ethernet=True)
    arp = bytes(12) + b"\x08\x06" + bytes(28)
    assert imp.submit(arp, 0) == [arp]
    assert imp.counters["ce_marked"] == imp.counters["ecn_dropped"] == 0


def test_queue_step_marks_past_the_threshold() -> None:
    """8 Mbit/s, 1000-byte packets take 1 ms each: a burst of 20 into a 2 KB bucket
    queues them up; those that wait more than 5 ms are marked, the others not."""
    imp = Impairment(rate_bps=8_000_000, burst=2000, ce_threshold=5 * MS, ethernet=False)
    waits = []
    for i in range(20):
        before = imp.counters["ce_marked"]
        due = imp.submit(packet(ecn.ECT_1, i, size=980), 0)
        waits.append(imp.counters["ce_marked"] > before)
        assert len(due) <= 1
    first_marked = waits.index(True)
    assert not any(waits[:first_marked]) and all(waits[first_marked:])
    assert 5 <= first_marked <= 8
    released = []
    while (deadline := imp.next_deadline()) is not None:
        released += imp.release(deadline)
    assert sum(codepoint(f, False) == ecn.CE for f in released) == 20 - first_marked


def test_queue_step_drops_not_ect_past_the_threshold() -> None:
    imp = Impairment(rate_bps=8_000_000, burst=2000, ce_threshold=5 * MS, ethernet=False)
    for i in range(20):
        imp.submit(packet(ecn.NOT_ECT, i, size=980), 0)
    assert imp.counters["ecn_dropped"] > 0 and imp.counters["ce_marked"] == 0


def test_marking_is_reproducible_by_seed() -> None:
    def marks(seed: int) -> list[bytes]:
        imp = Impairment(ecn=0.2, loss=0.1, seed=seed, ethernet=False)
        return [f for i in range(500) for f in imp.submit(packet(ecn.ECT_0, i), 0)]

    assert marks(1) == marks(1) != marks(2)


def test_impair_spec_parses_ecn_settings() -> None:
    config = parse_impairment("ecn=2%,ce_threshold=1ms,rate=10mbit")
    assert config == ImpairmentConfig(ecn=0.02, ce_threshold=1 * MS, rate_bps=10_000_000)
    assert ImpairmentConfig(ecn=0.01).active


def test_a_point_to_point_link_delivers_ce() -> None:
    got: list[bytes] = []
    link = PointToPoint(kind=KIND_IP, impair_ab=Impairment(ecn=1.0))
    link.b.set_receiver(got.append)
    link.a.send(packet(ecn.ECT_0))
    link.a.send(packet(ecn.NOT_ECT))
    link.poll()
    assert [codepoint(f, False) for f in got] == [ecn.CE]
    stats = link.stats()
    assert (stats["ce_marked"], stats["ecn_dropped"]) == (1, 1)
