"""Header prediction (``Connection._fast_path``) is an optimisation only: the same
connection driven with it and without it (``Options.header_prediction``) puts exactly the
same segments on the wire, over clean and impaired links (loss, duplication, reordering,
corruption), with and without timestamps and SACK.  Its hits are counted as Linux counts
them (TcpExtTCPHPHits, TcpExtTCPHPAcks)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from tcp_harness import Impairments, Net, digest, transfer

from rcunet.core.tcp import Options
from rcunet.wire import tcp

LINKS = {
    "clean": Impairments(),
    "everything": Impairments(loss=0.03, dup=0.03, reorder=0.15, corrupt=0.01),
}


def _wire_trace(seed: int, link: str, opts: Options, data: bytes) -> list[tuple[int, str, object]]:
    net = Net(seed=seed, imp=LINKS[link], client_opts=opts, server_opts=opts)
    got = transfer(net, data, read_chunk=16384)
    assert digest(got) == digest(data)
    return [(at, to, seg) for at, to, seg in net.log]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.parametrize("ts,sack", [(True, True), (False, False)])
def test_fast_path_changes_nothing_on_the_wire(seed: int, link: str, ts: bool,
                                               sack: bool) -> None:
    data = random.Random(seed).randbytes(400_000)
    opts = Options(timestamps=ts, sack=sack, rcvbuf=65536, rcvbuf_max=1 << 20)
    fast = _wire_trace(seed, link, opts, data)
    slow = _wire_trace(seed, link, dataclasses.replace(opts, header_prediction=False), data)
    assert len(fast) == len(slow)
    assert fast == slow


def _plain_segments(net: Net, to: str, *, payload: bool) -> int:
    """Segments sent to ``to`` with no SYN, FIN or RST, with or without payload."""
    return sum(1 for _at, dest, seg in net.log
               if dest == to and not seg.flags & (tcp.SYN | tcp.FIN | tcp.RST)
               and bool(seg.payload) is payload)


def test_fast_path_takes_the_bulk_of_a_clean_transfer() -> None:
    # The ACKs that come after the client's shutdown(SHUT_WR) (a send buffer's worth, the
    # data still queued then) take the full path, as in Linux, whose socket is in
    # FIN_WAIT1 from that call on: a transfer of several buffers keeps them a minority.
    data = bytes(1_000_000)
    net = Net(seed=1)
    assert len(transfer(net, data)) == len(data)
    assert net.server is not None
    # the receiver takes its data by header prediction, the sender its ACKs
    data_segments = _plain_segments(net, "server", payload=True)
    acks = _plain_segments(net, "client", payload=False)
    assert net.server.counters["TcpExtTCPHPHits"] > 0.8 * data_segments
    assert net.client.counters["TcpExtTCPHPAcks"] > 0.8 * acks


def test_without_header_prediction_nothing_is_counted_as_a_hit() -> None:
    opts = Options(header_prediction=False)
    net = Net(seed=1, client_opts=opts, server_opts=opts)
    assert len(transfer(net, bytes(50_000))) == 50_000
    assert net.server is not None
    for conn in (net.client, net.server):
        assert conn.counters["TcpExtTCPHPHits"] == conn.counters["TcpExtTCPHPAcks"] == 0
