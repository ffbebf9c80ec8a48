"""Data integrity over a bad link: a bulk transfer each way over a link that loses,
duplicates, reorders and corrupts frames, checked by hash, for several seeds.

Every seed moves 20 MB each way (about 6 s per seed on an idle core with lockdep on).
``RCUNET_TCP_BULK_MB=N`` changes the size; the free-threaded lane of scripts/test, which
repeats the host tests on a slower interpreter, uses a smaller one."""

from __future__ import annotations

import hashlib
import os
import random
import socket

import pytest
from tcp_helpers import connected_pair, transfer

from rcunet.host.network import Network
from rcunet.link.impair import ImpairmentConfig

MB = 1_000_000
SIZE = int(os.environ.get("RCUNET_TCP_BULK_MB", "20")) * MB


@pytest.mark.parametrize("seed,family", [(1, socket.AF_INET), (2, socket.AF_INET),
                                         (3, socket.AF_INET6)])
def test_bulk_transfer_over_impaired_link(seed: int, family: int) -> None:
    size = SIZE
    net = Network(seed=seed)
    a, b = net.host("a"), net.host("b")
    impair = ImpairmentConfig(loss=0.05, duplicate=0.02, reorder=0.02, corrupt=0.001,
                              seed=seed)
    net.link(a, b, ["10.0.0.1/24", "fd00::1/64"], ["10.0.0.2/24", "fd00::2/64"],
             impair=impair)
    srv, cli, child = connected_pair(net, a, b, family)
    data = random.Random(seed).randbytes(size)
    digest = hashlib.sha256(data).digest()
    assert hashlib.sha256(transfer(net, cli, child, data, timeout=3600)).digest() == digest
    assert hashlib.sha256(transfer(net, child, cli, data, timeout=3600)).digest() == digest
    # the impairments really happened and TCP repaired them
    for host in (a, b):
        assert host.counters.get("TcpRetransSegs") > 0
    assert a.counters.get("TcpInCsumErrors") + b.counters.get("TcpInCsumErrors") > 0
    for s in (cli, child, srv):
        s.close()
