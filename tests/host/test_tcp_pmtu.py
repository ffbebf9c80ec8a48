"""TCP path MTU discovery (RFC 1191 / RFC 8201 with RFC 5927's checks).

A connection sized for a 1500-byte first hop meets a router whose next link is
narrower: TCP segments carry DF (IPv6 is never fragmented on the way), the router answers
fragmentation-needed / packet-too-big, and the sender lowers its MSS and resends its
flight in segments that fit — no IP fragments, no lost or reordered bytes.
"""

from __future__ import annotations

import errno
import socket
from typing import Any

import pytest
from tcp_helpers import accept, listener, start_connect, transfer

from rcunet.host.network import Network
from rcunet.host.tcp.ipopts import IP_MTU_DISCOVER, IP_PMTUDISC_DONT, IP_PMTUDISC_WANT
from rcunet.wire import icmpv4, ipv4, tcp

NARROW = 1280


def _narrow_path(family: int) -> tuple[Network, Any, Any, Any, str]:
    """a -- r -- s -- b with 1500-byte edges and a NARROW link between the routers:
    neither end's MSS option knows about it."""
    net = Network()
    a, r, s, b = (net.host("a"), net.host("r", forwarding=True),
                  net.host("s", forwarding=True), net.host("b"))
    net.link(a, r, ["10.1.0.2/24", "fd01::2/64"], ["10.1.0.1/24", "fd01::1/64"])
    net.link(r, s, ["10.3.0.1/24", "fd03::1/64"], ["10.3.0.2/24", "fd03::2/64"], mtu=NARROW)
    net.link(s, b, ["10.2.0.1/24", "fd02::1/64"], ["10.2.0.2/24", "fd02::2/64"])
    routes = ((a, "default", "10.1.0.1"), (a, "default6", "fd01::1"),
              (b, "default", "10.2.0.1"), (b, "default6", "fd02::1"),
              (r, "10.2.0.0/24", "10.3.0.2"), (r, "fd02::/64", "fd03::2"),
              (s, "10.1.0.0/24", "10.3.0.1"), (s, "fd01::/64", "fd03::1"))
    for host, prefix, via in routes:
        host.add_route(prefix, via=via)
    return net, a, r, b, ("10.2.0.2" if family == socket.AF_INET else "fd02::2")


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_connection_shrinks_its_segments_to_the_path(family: int) -> None:
    net, a, r, b, server = _narrow_path(family)
    srv = listener(b, family, server, 8080)
    cli = start_connect(a, family, server, 8080)
    child = accept(net, srv)
    first_mss = cli._sk.conn.tcb.snd_mss
    data = bytes(range(251)) * 1200  # 301 KB: many full segments in flight at once
    assert transfer(net, cli, child, data) == data
    headers = 40 if family == socket.AF_INET else 60
    ts = 12 if cli._sk.conn.tcb.ts_ok else 0
    assert first_mss == 1500 - headers - ts
    assert cli._sk.conn.tcb.snd_mss == NARROW - headers - ts
    if family == socket.AF_INET:
        assert r.counters.get("IpFragFails") >= 1  # DF segments it could not forward
        assert a.counters.get("IpFragCreates") == 0
    else:
        assert r.counters.get("Ip6InTooBigErrors") >= 1
        assert a.counters.get("Ip6FragCreates") == 0
    # and the other direction learned nothing: b's segments fit its own link
    assert child._sk.conn.tcb.snd_mss == first_mss
    for s in (cli, child, srv):
        s.close()


def test_error_quoting_an_unsent_sequence_number_is_ignored() -> None:
    """RFC 5927 §4.1: a forged fragmentation-needed must quote a sequence number in
    [SND.UNA, SND.NXT]; otherwise it changes nothing and is counted."""
    net, a, r, b, server = _narrow_path(socket.AF_INET)
    srv = listener(b, socket.AF_INET, server, 8080)
    cli = start_connect(a, socket.AF_INET, server, 8080)
    child = accept(net, srv)
    conn = cli._sk.conn
    mss = conn.tcb.snd_mss
    laddr, lport = cli.getsockname()
    quoted = ipv4.Repr(socket.inet_aton(laddr), socket.inet_aton(server), tcp.PROTOCOL,
                       tcp.Repr(lport, 8080, (conn.tcb.snd_nxt + 100_000) & 0xFFFFFFFF, 0,
                                tcp.ACK, 1000).build(), dont_fragment=True).build()
    forged = icmpv4.Repr.frag_needed(576, quoted)
    r.ip.output(None, socket.inet_aton(laddr), ipv4.PROTO_ICMP, lambda src, dst: forged.build())
    net.run(0.01)
    assert conn.tcb.snd_mss == mss
    assert a.counters.get("TcpExtOutOfWindowIcmps") == 1
    for s in (cli, child, srv):
        s.close()



def test_pmtudisc_dont_sends_without_df_and_keeps_its_mss() -> None:
    """IP_MTU_DISCOVER = IP_PMTUDISC_DONT: segments leave without DF
    (ip_dont_fragment), so the router fragments them instead of answering
    fragmentation-needed, and the connection keeps its MSS (tcp_v4_mtu_reduced
    ignores the path under DONT); every byte arrives in order."""
    net, a, r, b, server = _narrow_path(socket.AF_INET)
    srv = listener(b, socket.AF_INET, server, 8080)
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, IP_PMTUDISC_DONT)
    assert cli.getsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER) == IP_PMTUDISC_DONT
    cli.settimeout(0)
    try:
        cli.connect((server, 8080))
    except BlockingIOError:
        pass
    child = accept(net, srv)
    first_mss = cli._sk.conn.tcb.snd_mss
    data = bytes(range(251)) * 400
    assert transfer(net, cli, child, data) == data
    assert cli._sk.conn.tcb.snd_mss == first_mss
    assert r.counters.get("IpFragOKs") >= 1 and r.counters.get("IpFragFails") == 0
    for s in (cli, child, srv):
        s.close()


def test_mtu_discover_out_of_range_is_einval() -> None:
    """do_ip_setsockopt: IP_MTU_DISCOVER takes IP_PMTUDISC_DONT..IP_PMTUDISC_OMIT."""
    net, a, _r, _b, _server = _narrow_path(socket.AF_INET)
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OSError) as err:
        cli.setsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER, 6)
    assert err.value.errno == errno.EINVAL
    assert cli.getsockopt(socket.IPPROTO_IP, IP_MTU_DISCOVER) == IP_PMTUDISC_WANT
    cli.close()


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_learned_path_mtu_bounds_the_next_child_from_its_first_segment(family: int) -> None:
    """A path MTU the listener's host learned outlives the connection that learned it:
    the next child's SYN-ACK still advertises the route's MSS (dst_metric_advmss), but
    the child sends at most the path's from the start (tcp_v4_syn_recv_sock ->
    tcp_sync_mss(dst_mtu)), with no fragmentation-needed to wait for."""
    net, a, r, b, server = _narrow_path(family)
    srv = listener(b, family, server, 8080)
    first = start_connect(a, family, server, 8080)
    child = accept(net, srv)
    data = bytes(range(251)) * 100
    assert transfer(net, child, first, data) == data  # b learns the narrow path
    headers = 40 if family == socket.AF_INET else 60
    ts = 12 if child._sk.conn.tcb.ts_ok else 0
    assert child._sk.conn.tcb.snd_mss == NARROW - headers - ts
    errors_before = r.counters.get("IpFragFails") + r.counters.get("Ip6InTooBigErrors")
    second = start_connect(a, family, server, 8080)
    child2 = accept(net, srv)
    assert second._sk.conn.tcb.snd_mss == 1500 - headers - ts  # advertised: the route's
    assert child2._sk.conn.tcb.snd_mss == NARROW - headers - ts
    assert transfer(net, child2, second, data) == data
    assert r.counters.get("IpFragFails") + r.counters.get("Ip6InTooBigErrors") \
        == errors_before
    for s in (first, child, second, child2, srv):
        s.close()
