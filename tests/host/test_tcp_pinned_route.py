"""A connected TCP socket keeps its route pinned (Linux's sk_dst_cache): one lookup, then
no lookup and no refcount traffic per segment while the route cache is unchanged; a route,
address or PMTU change (a cache invalidation) makes the next segment look up again, so
the change takes effect at once; a finished socket releases its route (no entry leaks)."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from tcp_helpers import accept, connected_pair, listener, start_connect, transfer

from rcunet.host.host import Host
from rcunet.host.network import Network
from rcunet.host.routecache import DstCache, DstEntry


class CountingDstCache(DstCache):
    """The host's route cache, recording each lookup's destination."""

    def __init__(self, host: Host) -> None:
        super().__init__(host)
        self.calls: list[bytes] = []

    def lookup(self, dst: bytes, oif: int = 0) -> DstEntry | None:
        self.calls.append(dst)
        return super().lookup(dst, oif)


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_one_lookup_then_the_pinned_route(family: int) -> None:
    net, a, b = Network.two_hosts()
    a.dst_cache = cache = CountingDstCache(a)
    srv, cli, child = connected_pair(net, a, b, family)
    pinned = cli._sk.dst
    peer = bytes([10, 0, 0, 2]) if family == socket.AF_INET else socket.inet_pton(
        socket.AF_INET6, "fd00::2")
    assert pinned is not None and pinned.dst == peer
    refs = pinned.ref.read()
    cache.calls.clear()  # the connection's own lookup
    data = bytes(range(256)) * 2000
    assert transfer(net, cli, child, data) == data
    assert cache.calls == []  # every segment went out through the pinned entry
    assert cli._sk.dst is pinned and pinned.ref.read() == refs  # no get/put per segment
    for s in (cli, child, srv):
        s.close()


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_invalidation_makes_the_next_segment_look_up_again(family: int) -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b, family)
    old = cli._sk.dst
    assert old is not None
    a.dst_cache.invalidate()  # what add_route / remove_route / a PMTU update do
    assert transfer(net, cli, child, b"after the change") == b"after the change"
    new = cli._sk.dst
    assert new is not None and new is not old
    assert old.freed  # the cache's and the socket's references both dropped
    for s in (cli, child, srv):
        s.close()


def _two_paths() -> tuple[Network, Any, Any, Any, Any]:
    """a -- r1 -- b and a -- r2 -- b (b answers through r1); the links out of a."""
    net = Network()
    a, r1, r2, b = (net.host("a"), net.host("r1", forwarding=True),
                    net.host("r2", forwarding=True), net.host("b"))
    to_r1 = net.link(a, r1, ["10.1.0.2/24"], ["10.1.0.1/24"])
    to_r2 = net.link(a, r2, ["10.3.0.2/24"], ["10.3.0.1/24"])
    net.link(r1, b, ["10.2.0.1/24"], ["10.2.0.2/24"])
    net.link(r2, b, ["10.4.0.1/24"], ["10.4.0.2/24"])
    b.add_route("10.1.0.0/24", via="10.2.0.1")
    b.add_route("10.3.0.0/24", via="10.4.0.1")
    r2.add_route("10.2.0.0/24", via="10.4.0.2")  # b's address on r1's side, via b's other leg
    return net, a, b, to_r1, to_r2


def test_a_route_change_moves_an_established_flow() -> None:
    net, a, b, to_r1, to_r2 = _two_paths()
    first = a.add_route("default", via="10.1.0.1")
    srv = listener(b, socket.AF_INET, "10.2.0.2", 8080)
    cli = start_connect(a, socket.AF_INET, "10.2.0.2", 8080)
    child = accept(net, srv)
    assert transfer(net, cli, child, b"x" * 50_000) == b"x" * 50_000
    a.remove_route(first)
    a.add_route("default", via="10.3.0.1")
    sent_r1, sent_r2 = to_r1.a.stats()["tx_packets"], to_r2.a.stats()["tx_packets"]
    assert transfer(net, cli, child, b"y" * 50_000) == b"y" * 50_000
    assert to_r1.a.stats()["tx_packets"] == sent_r1  # nothing more on the old path
    assert to_r2.a.stats()["tx_packets"] > sent_r2 + 30
    for s in (cli, child, srv):
        s.close()


def test_finished_sockets_release_their_routes() -> None:
    net, a, b = Network.two_hosts()
    for port in (8080, 8081, 8082):
        srv, cli, child = connected_pair(net, a, b, socket.AF_INET, port=port)
        assert transfer(net, cli, child, b"data") == b"data"
        for s in (cli, child, srv):
            s.close()
    # both ends through FIN, TIME_WAIT and its expiry
    assert net.run_until(lambda: not a.tcp.sockets and not b.tcp.sockets, 120)
    for host in (a, b):
        host.dst_cache.invalidate()  # drops the cache's own references
        assert host.dst_cache.live_entries() == 0  # no socket kept one pinned


def test_a_resolved_neighbour_is_sent_to_without_resolve() -> None:
    """neigh_output: a REACHABLE neighbour's address is read with no lock and no
    ``resolve`` per segment (NeighbourTable.lladdr_rcu); an unresolved one still goes
    through resolve (the handshake's ARP)."""
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    table = cli._sk.dst.iface.neigh4
    assert table.stats["lookups"] >= 1  # the first SYN resolved the address
    lookups = table.stats["lookups"]
    data = bytes(range(256)) * 1000
    assert transfer(net, cli, child, data) == data
    assert table.stats["lookups"] == lookups
    for s in (cli, child, srv):
        s.close()
