"""Data integrity over a bad link: a bulk transfer each way over a link that loses,
duplicates, reorders and corrupts frames, checked by hash, for several seeds.

By default the first seed moves 10 MB each way and the others 4 MB (20 MB each way takes
about 6 s on an idle core with lockdep on, 25 s on the shared CI machine).  Set
``RCUNET_TCP_BULK_MB=20`` to move the full 20 MB for every seed."""

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
FULL = int(os.environ.get("RCUNET_TCP_BULK_MB", "0")) * MB


@pytest.mark.parametrize("seed,size,family", [(1, 10 * MB, socket.AF_INET),
                                              (2, 4 * MB, socket.AF_INET),
                                              (3, 4 * MB, socket.AF_INET6)])
def test_bulk_transfer_over_impaired_link(seed: int, size: int, family: int) -> None:
    size = FULL or size
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
