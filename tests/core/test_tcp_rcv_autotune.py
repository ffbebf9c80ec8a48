"""Receive-buffer autotuning in the engine (Linux tcp_rcv_space_adjust with the receiver's
RTT from timestamps or, without them, from the time a window takes to arrive), on the
virtual clock of the two-engine harness."""

from __future__ import annotations

import random

import pytest
from tcp_harness import MS, Net, digest, transfer

from rcunet.core.tcp import Options
from rcunet.core.tcp.listen import choose_wscale

MB = 1 << 20


def _opts(**kw: object) -> Options:
    base: dict[str, object] = dict(rcvbuf=65536, rcvbuf_max=4 * MB, wscale_space=4 * MB)
    base.update(kw)
    return Options(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize("timestamps", [True, False])
def test_buffer_grows_with_what_the_reader_consumes(timestamps: bool) -> None:
    opts = _opts(timestamps=timestamps)
    net = Net(seed=1, delay=5 * MS, client_opts=opts, server_opts=opts)
    data = random.Random(1).randbytes(4 * MB)
    assert digest(transfer(net, data, read_chunk=16384)) == digest(data)
    server = net.server
    assert server is not None
    assert server.tcb.rcv_wscale == choose_wscale(4 * MB) == 7
    assert 65536 < server.rcvbuf <= 4 * MB
    assert net.client.rcvbuf == 65536  # it read nothing


def test_growth_is_capped_by_rcvbuf_max() -> None:
    """tcp_rcvbuf_grow: up to tcp_rmem[2], whatever the window scale can say (without a
    scale the window field stays at most 65535; the buffer still grows, as Linux's)."""
    opts = _opts(rcvbuf_max=200_000)
    net = Net(seed=2, delay=5 * MS, client_opts=opts, server_opts=opts)
    data = random.Random(2).randbytes(2 * MB)
    assert digest(transfer(net, data, read_chunk=16384)) == digest(data)
    assert net.server is not None and net.server.rcvbuf == 200_000
    unscaled = _opts(window_scaling=False, rcvbuf=32768, rcvbuf_max=200_000)
    net = Net(seed=2, delay=5 * MS, client_opts=unscaled, server_opts=unscaled)
    assert digest(transfer(net, data, read_chunk=16384)) == digest(data)
    assert net.server is not None and 32768 < net.server.rcvbuf <= 200_000


def test_no_growth_without_a_ceiling() -> None:
    opts = _opts(rcvbuf_max=0, wscale_space=0)
    net = Net(seed=3, delay=5 * MS, client_opts=opts, server_opts=opts)
    data = random.Random(3).randbytes(2 * MB)
    assert digest(transfer(net, data, read_chunk=16384)) == digest(data)
    assert net.server is not None and net.server.rcvbuf == 65536
    assert net.server.tcb.rcv_wscale == choose_wscale(65536) == 1


def test_a_reader_that_does_not_read_never_grows_the_buffer() -> None:
    opts = _opts()
    net = Net(seed=4, delay=5 * MS, client_opts=opts, server_opts=opts)
    net.run(until=100 * MS)
    sent = 0
    for _ in range(200):
        sent += net.client.send(bytes(65536), net.now)
        net.flush()
        net.run(until=net.now + 10 * MS)
    assert net.server is not None and net.server.readable <= 65536
    assert net.server.rcvbuf == 65536
