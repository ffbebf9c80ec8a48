"""The ECN loop end to end: two Hosts over an in-process link whose rate-limited queue
marks CE once frames wait longer than ``ce_threshold`` (an L4S / DCTCP style step),
instead of dropping them.  An ECN flow (classic or AccECN) backs off on the marks: the
bytes arrive intact, the queue never overflows and nothing is retransmitted; the same
flow without ECN fills the queue until it drops."""

from __future__ import annotations

import hashlib
import random
import socket

import pytest
from tcp_helpers import connected_pair, transfer

from rcunet.host.network import Network
from rcunet.link.impair import MS, ImpairmentConfig
from rcunet.tuning import Tuning

MB = 1_000_000


def _run(tcp_ecn: int) -> tuple[dict[str, int], int, int]:
    net = Network(seed=7)
    tuning = Tuning(tcp_ecn=tcp_ecn)
    a, b = net.host("a", tuning=tuning), net.host("b", tuning=tuning)
    # 20 Mbit/s, 1 ms delay; marks beyond 2 ms of queue, drops beyond 64 KB of it
    impair = ImpairmentConfig(rate_bps=20_000_000, delay=1 * MS, ce_threshold=2 * MS,
                              rate_queue=64 * 1024, seed=7)
    link = net.link(a, b, ["10.0.0.1/24"], ["10.0.0.2/24"], impair=impair)
    srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    data = random.Random(7).randbytes(2 * MB)
    got = transfer(net, cli, child, data, timeout=600)
    assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
    stats = link.stats()  # type: ignore[union-attr]
    for s in (cli, child, srv):
        s.close()
    return stats, a.counters.get("TcpRetransSegs"), a.counters.get("TcpOutSegs")


@pytest.mark.parametrize("tcp_ecn", [1, 3])
def test_ecn_flow_keeps_the_queue_at_the_marking_threshold(tcp_ecn: int) -> None:
    stats, retrans, _out = _run(tcp_ecn)
    assert stats.get("ce_marked", 0) > 0
    assert stats.get("rate_dropped", 0) == 0
    assert retrans == 0


def test_without_ecn_the_same_queue_drops() -> None:
    stats, retrans, _out = _run(0)
    assert stats.get("ce_marked", 0) == 0
    assert stats.get("ecn_dropped", 0) + stats.get("rate_dropped", 0) > 0
    assert retrans > 0
