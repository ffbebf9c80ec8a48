"""Data integrity: every byte arrives once, in order, across lossy/duplicating/reordering/
corrupting links (seeded), both directions, both congestion controls, with and without SACK."""

from __future__ import annotations

import random

import pytest
from tcp_harness import MS, SECOND, Impairments, Net, digest, transfer

from rcunet.core.tcp import Options, State

MB = 1 << 20

LINKS = {
    "clean": Impairments(),
    "loss3": Impairments(loss=0.03),
    "dup_reorder": Impairments(dup=0.05, reorder=0.2),
    "everything": Impairments(loss=0.04, dup=0.04, reorder=0.15, corrupt=0.02),
}


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.parametrize("cc,sack", [("cubic", True), ("reno", False), ("reno", True)])
def test_transfer_is_exact(seed: int, link: str, cc: str, sack: bool) -> None:
    data = random.Random(seed).randbytes(MB)
    opts = Options(congestion_control=cc, sack=sack)
    net = Net(seed=seed, imp=LINKS[link], client_opts=opts, server_opts=opts)
    got = transfer(net, data)
    assert digest(got) == digest(data)
    if link == "clean":
        assert net.client.counters["TcpRetransSegs"] == 0


def test_multi_megabyte_transfer_over_a_bad_link() -> None:
    data = random.Random(42).randbytes(4 * MB)
    net = Net(seed=42, imp=Impairments(loss=0.02, dup=0.02, reorder=0.1, corrupt=0.01))
    got = transfer(net, data)
    assert digest(got) == digest(data)
    assert net.server.counters["TcpInCsumErrors"] > 0  # corruption happened and was dropped
    assert net.server.counters["TcpExtTCPOFOQueue"] > 0


def test_both_directions_at_once_and_clean_teardown() -> None:
    rng = random.Random(7)
    up, down = rng.randbytes(300_000), rng.randbytes(500_000)
    net = Net(seed=7, imp=Impairments(loss=0.03, reorder=0.1))
    net.run(until=SECOND)
    c, s = net.client, net.server
    sent_up = sent_down = 0
    got_up, got_down = bytearray(), bytearray()
    for _ in range(1_000_000):
        if sent_up < len(up):
            sent_up += c.send(up[sent_up : sent_up + 65536], net.now)
            if sent_up == len(up):
                c.shutdown_write(net.now)
        if sent_down < len(down):
            sent_down += s.send(down[sent_down : sent_down + 65536], net.now)
            if sent_down == len(down):
                s.shutdown_write(net.now)
        if s.readable:
            got_up += s.recv(1 << 20, net.now)
        if c.readable:
            got_down += c.recv(1 << 20, net.now)
        net.flush()
        if not net.step():
            break
    assert bytes(got_up) == up and bytes(got_down) == down
    assert c.state is State.CLOSED and s.state is State.CLOSED  # TIME-WAIT ran out too


def test_tiny_buffers_and_mss() -> None:
    data = random.Random(5).randbytes(200_000)
    opts = Options(mss=536, rcvbuf=3000, sndbuf=2000)
    net = Net(seed=5, imp=Impairments(loss=0.05, reorder=0.2), client_opts=opts,
              server_opts=opts, delay=3 * MS)
    got = transfer(net, data, chunk=700, read_chunk=333)
    assert got == data


@pytest.mark.parametrize("sack", [True, False])
def test_sequence_numbers_and_timestamps_wrap_mid_transfer(sack: bool) -> None:
    """The same run with every sequence number and timestamp shifted to wrap past 2**32
    behaves identically: same bytes, same virtual duration, same counters."""
    data = random.Random(11).randbytes(MB)
    runs = []
    for wrap in (False, True):
        shifted = dict(client_iss=0xFFFFFFFF - 300_000, server_iss=0xFFFFFFF0,
                       client_ts_offset=0xFFFFFFFF - 500, server_ts_offset=0xFFFFFF00)
        opts = Options(sack=sack)
        net = Net(seed=11, imp=Impairments(loss=0.03, reorder=0.1), client_opts=opts,
                  server_opts=opts, **(shifted if wrap else {}))
        got = transfer(net, data)
        assert digest(got) == digest(data)
        runs.append((net.now, net.client.counters.values, net.server.counters.values))
        if wrap:
            assert net.server.tcb.rcv_nxt < 0x100000  # wrapped past zero
    assert runs[0] == runs[1]
