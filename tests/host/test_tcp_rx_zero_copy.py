"""The receive queue keeps views of the pooled receive buffers ("skbs") the host copied
each data segment into, so the host may recycle a buffer only once every byte delivered
with it has been read: ``TcpSock.engine`` records one ``rx_skbs`` entry per data delivery
(with a buffer or without one), ``recv`` counts them off in delivery order.

A buffer recycled early would be handed to the next segment, whose bytes would then
overwrite unread data: the tests keep data unread while more arrives and check every
byte, then check that every buffer went back to its pool."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from tcp_helpers import connected_pair

import rcunet.host.tcp.buffers as tcp_buffers
from rcunet.host.network import Network


def _pattern(n: int, seed: int) -> bytes:
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


def _drain(net: Network, sock: Any, n: int, chunk: int) -> bytes:
    got = bytearray()

    def ready() -> bool:
        while len(got) < n:
            try:
                data = sock.recv(min(chunk, n - len(got)))
            except BlockingIOError:
                return False
            got.extend(data)
        return True

    assert net.run_until(ready, 30)
    return bytes(got)


def _send(net: Network, sock: Any, data: bytes) -> None:
    sent = 0

    def ready() -> bool:
        nonlocal sent
        while sent < len(data):
            try:
                sent += sock.send(data[sent:])
            except BlockingIOError:
                return False
        return True

    assert net.run_until(ready, 30)


def _pool_balance(host: Any) -> list[tuple[int, int]]:
    """(free, created) of each of this thread's pools (deterministic: one thread)."""
    return [(pool.free_count(), pool.created.value()) for pool in host.tcp.buffers.pools()]


def test_unread_bytes_survive_later_segments() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    first, second = _pattern(60_000, 1), _pattern(60_000, 2)
    _send(net, cli, first)
    net.run(1.0)  # delivered, unread: its buffers are held by rx_skbs
    held = sum(1 for buf, _ in child._sk.rx_skbs if buf is not None)
    assert held >= 20  # ~1448-byte segments, each in its own 2 KB buffer
    _send(net, cli, second)  # needs more buffers: none of the held ones may be reused
    assert _drain(net, child, 120_000, 3001) == first + second
    assert not child._sk.rx_skbs
    for free, created in _pool_balance(b):
        assert free == created  # every buffer back in its pool once read
    for s in (cli, child, srv):
        s.close()


def test_deliveries_without_a_buffer_keep_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    # A large class of 4 KB: 9000-byte-MTU segments arrive without a pooled buffer, small
    # ones with one; the entries of both interleave in rx_skbs.
    monkeypatch.setattr(tcp_buffers, "SKB_CLASSES", ((2048, 512), (4096, 64)))
    net = Network()
    a, b = net.host("a"), net.host("b")
    net.link(a, b, ["10.0.0.1/24"], ["10.0.0.2/24"], mtu=9000)
    srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    expected = bytearray()
    kinds: set[bool] = set()
    for round_ in range(6):
        for size in (20_000, 300, 1_000, 17_777):
            data = _pattern(size, round_ + size)
            _send(net, cli, data)
            net.run(0.01)
            expected += data
        kinds |= {buf is None for buf, _ in child._sk.rx_skbs}
        # read part of what arrived: entries are counted off across both kinds
        got = _drain(net, child, 15_000, 4_321)
        assert got == bytes(expected[:15_000])
        del expected[:15_000]
    assert kinds == {True, False}  # both kinds of delivery were queued unread
    assert _drain(net, child, len(expected), 5_000) == bytes(expected)
    assert not child._sk.rx_skbs
    for free, created in _pool_balance(b):
        assert free == created
    for s in (cli, child, srv):
        s.close()
