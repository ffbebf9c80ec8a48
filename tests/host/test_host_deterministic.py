"""Hosts and networks on virtual time: ARP/ND, routing, fragmentation, ICMP, PMTU, UDP.

Every test builds its topology with ``Network`` (a virtual clock, no threads) and drives
it with ``run_until``, so timings (ARP retries, reassembly timeouts) are exact.
"""

from __future__ import annotations

import errno
import socket

import pytest

from rcunet.host.network import Network
from rcunet.tuning import Tuning
from rcunet.wire import ethernet, ipv4, ipv6, udp

SECOND = 1_000_000_000


def udp_socket(host, family=socket.AF_INET, port=None):
    sock = host.socket(family, socket.SOCK_DGRAM)
    sock.setblocking(False)
    if port is not None:
        sock.bind(("", port))
    return sock


def readable(sock):
    return lambda: sock._sk.has_data() or bool(sock._sk.err)


# -- neighbour resolution ---------------------------------------------------------------


@pytest.mark.parametrize("family, dst", [(socket.AF_INET, "10.0.0.2"),
                                         (socket.AF_INET6, "fd00::2")])
def test_neighbour_resolution_then_delivery(family, dst):
    net, a, b = Network.two_hosts()
    rx = udp_socket(b, family, 5000)
    tx = udp_socket(a, family)
    tx.sendto(b"first", (dst, 5000))
    assert net.run_until(readable(rx), 1.0)
    data, source = rx.recvfrom(100)
    assert data == b"first"
    assert source[0] == ("10.0.0.1" if family == socket.AF_INET else "fd00::1")
    counters = a.counters.snapshot()
    if family == socket.AF_INET:
        assert counters["RcunetArpOutRequests"] == 1
    else:
        assert counters["Icmp6OutNeighborSolicits"] == 1
    # The entry is cached now: a second datagram needs no new solicitation.
    tx.sendto(b"second", (dst, 5000))
    assert net.run_until(readable(rx), 1.0)
    assert rx.recv(100) == b"second"
    assert a.counters.snapshot().get("RcunetArpOutRequests", 0) == counters.get(
        "RcunetArpOutRequests", 0)


def test_neighbour_failure_reports_host_unreachable():
    """ARP for an absent neighbour: 3 probes 1 s apart, then the queued datagram is
    answered with ICMP host unreachable, which a connected socket reads as EHOSTUNREACH."""
    net, a, b = Network.two_hosts()
    tx = udp_socket(a)
    tx.connect(("10.0.0.99", 4000))
    tx.send(b"into the void")
    assert not net.run_until(lambda: bool(tx._sk.err), 2.5)  # still probing at 2.5 s
    assert a.counters.get("RcunetArpOutRequests") == 3
    assert net.run_until(lambda: bool(tx._sk.err), 2.0)
    assert a.counters.get("RcunetNeighUnreachable") == 1
    with pytest.raises(OSError) as info:
        tx.recv(10)
    assert info.value.errno == errno.EHOSTUNREACH


# -- routing and forwarding -----------------------------------------------------------------


@pytest.mark.parametrize("family, dst", [(socket.AF_INET, "10.2.0.2"),
                                         (socket.AF_INET6, "fd02::2")])
def test_routing_through_a_router(family, dst):
    net, a, r, b = Network.routed()
    rx = udp_socket(b, family, 6000)
    tx = udp_socket(a, family)
    tx.sendto(b"routed", (dst, 6000))
    assert net.run_until(readable(rx), 2.0)
    data, source = rx.recvfrom(100)
    assert data == b"routed"
    assert source[0] in ("10.1.0.2", "fd01::2")
    name = "IpForwDatagrams" if family == socket.AF_INET else "Ip6OutForwDatagrams"
    assert r.counters.get(name) == 1


def test_ttl_expiry_answers_time_exceeded():
    net, a, r, b = Network.routed()
    rx = udp_socket(b, port=6001)
    tx = udp_socket(a)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 1)
    tx.connect(("10.2.0.2", 6001))
    tx.send(b"short-lived")
    net.run(1.0)
    assert not rx._sk.has_data()
    assert r.counters.get("IcmpOutTimeExcds") == 1
    assert a.counters.get("IcmpInTimeExcds") == 1


def test_a_router_routes_before_it_checks_the_ttl():
    """ip_route_input runs before ip_forward's TTL test: a TTL-1 packet the router has no
    route for is answered net unreachable, not time exceeded."""
    net, a, r, b = Network.routed()
    tx = udp_socket(a)
    tx.setsockopt(socket.IPPROTO_IP, socket.IP_TTL, 1)
    tx.sendto(b"nowhere", ("192.0.2.1", 9))  # a's default route is r; r has none
    net.run(1.0)
    assert r.counters.get("IpOutNoRoutes") == 1
    assert r.counters.get("IcmpOutDestUnreachs") == 1
    assert r.counters.get("IcmpOutTimeExcds") == 0


def test_a_router_refuses_a_link_local_source_beyond_its_link():
    """RFC 4291 §2.5.6, ip6_forward: a link-local source must not be forwarded; the
    router counts Ip6InAddrErrors and answers destination unreachable, beyond scope."""
    net, a, r, b = Network.routed()
    rx = udp_socket(b, socket.AF_INET6, 6003)
    a_if = next(i for i in a.interfaces.values() if i.mac is not None)
    r_if = next(i for i in r.interfaces.values() if i.has_address(_packed("fd01::1")))
    datagram = udp.Repr(40000, 6003, b"scoped").build(
        src=_packed("fe80::1"), dst=_packed("fd02::2"))
    packet = ipv6.Repr(_packed("fe80::1"), _packed("fd02::2"), udp.PROTOCOL, datagram)
    r.receive(r_if, ethernet.Repr(r_if.mac, a_if.mac, ethernet.ETHERTYPE_IPV6,
                                  packet.build()).build())
    net.run(1.0)
    assert not rx._sk.has_data()
    assert r.counters.get("Ip6InAddrErrors") == 1
    assert r.counters.get("Icmp6OutDestUnreachs") == 1
    assert r.counters.get("Ip6OutForwDatagrams") == 0


def _packed(text):
    import ipaddress

    return ipaddress.ip_address(text).packed


def test_forwarding_off_drops_transit_traffic():
    net, a, r, b = Network.routed()
    r.set_tuning(r.tuning.__class__(ip_forward=False))
    rx = udp_socket(b, port=6002)
    udp_socket(a).sendto(b"x", ("10.2.0.2", 6002))
    net.run(1.0)
    assert not rx._sk.has_data()
    assert r.counters.get("IpInAddrErrors") == 1


def test_no_route_is_enetunreach():
    net, a, b = Network.two_hosts()
    with pytest.raises(OSError) as info:
        udp_socket(a).sendto(b"x", ("192.0.2.1", 9))
    assert info.value.errno == errno.ENETUNREACH


# -- fragmentation, reassembly, PMTU -----------------------------------------------------


@pytest.mark.parametrize("family, dst", [(socket.AF_INET, "10.2.0.2"),
                                         (socket.AF_INET6, "fd02::2")])
def test_large_datagram_is_fragmented_and_reassembled(family, dst):
    net, a, r, b = Network.routed()
    rx = udp_socket(b, family, 6100)
    payload = bytes(range(256)) * 40  # 10240 bytes: 8 fragments at MTU 1500
    udp_socket(a, family).sendto(payload, (dst, 6100))
    assert net.run_until(readable(rx), 2.0)
    assert rx.recv(65535) == payload
    frag_ok = "IpFragOKs" if family == socket.AF_INET else "Ip6FragOKs"
    assert a.counters.get(frag_ok) == 1
    reasm = b.ip.reassembly_counters()
    assert reasm["IpReasmOKs" if family == socket.AF_INET else "Ip6ReasmOKs"] == 1


def _fragments(src, dst, payload, ident=77, size=16):
    datagram = udp.Repr(1111, 2222, payload).build(src=src, dst=dst)
    pieces = []
    for offset in range(0, len(datagram), size):
        chunk = datagram[offset:offset + size]
        more = offset + size < len(datagram)
        pieces.append(ipv4.Repr(src, dst, ipv4.PROTO_UDP, chunk, ident=ident,
                                more_fragments=more, frag_offset=offset))
    return pieces


def _inject(host, iface, packet: ipv4.Repr, src_mac=b"\x02\x00\x00\x00\x00\x99"):
    frame = ethernet.Repr(iface.mac, src_mac, ethernet.ETHERTYPE_IPV4, packet.build()).build()
    host.receive(iface, frame)


def test_overlapping_fragments_discard_the_datagram():
    net, a, b = Network.two_hosts()
    rx = udp_socket(b, port=2222)
    iface = b.interface("eth0")
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    pieces = _fragments(src, dst, b"A" * 40)
    _inject(b, iface, pieces[0])
    overlapping = pieces[1]._replace(frag_offset=8, payload=b"B" * 16)  # overlaps piece 0
    _inject(b, iface, overlapping)
    for piece in pieces[1:]:
        _inject(b, iface, piece)
    net.run(0.1)
    assert not rx._sk.has_data()
    assert b.ip.reassembly_counters()["IpReasmOverlaps"] >= 1


def test_incomplete_datagram_times_out_with_icmp():
    net, a, b = Network.two_hosts()
    udp_socket(b, port=2222)
    iface = b.interface("eth0")
    pieces = _fragments(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), b"C" * 40)
    _inject(b, iface, pieces[0])  # the first fragment only
    net.run(29.0)
    assert b.ip.reassembly_counters()["IpReasmTimeout"] == 0
    net.run(2.0)  # ipfrag_time is 30 s
    assert b.ip.reassembly_counters()["IpReasmTimeout"] == 1
    assert b.counters.get("IcmpOutTimeExcds") == 1
    assert a.counters.get("IcmpInTimeExcds") == 1


def test_packet_too_big_updates_path_mtu():
    net = Network()
    a, r, b = net.host("a"), net.host("r", forwarding=True), net.host("b")
    net.link(a, r, "fd01::2/64", "fd01::1/64")
    net.link(r, b, "fd02::1/64", "fd02::2/64", mtu=1280)
    a.add_route("default6", via="fd01::1")
    b.add_route("default6", via="fd02::1")
    rx = udp_socket(b, socket.AF_INET6, 7000)
    tx = udp_socket(a, socket.AF_INET6)
    payload = b"p" * 1400
    tx.sendto(payload, ("fd02::2", 7000))  # fits a's 1500 link, not r's 1280 link
    net.run(1.0)
    assert not rx._sk.has_data()
    assert r.counters.get("Ip6InTooBigErrors") == 1
    dst = bytes.fromhex("fd020000000000000000000000000002")
    assert a.pmtu.get(dst, a.now()) == 1280
    tx.sendto(payload, ("fd02::2", 7000))  # now fragmented at the source
    assert net.run_until(readable(rx), 1.0)
    assert rx.recv(2000) == payload


# -- UDP delivery --------------------------------------------------------------------------


def test_port_unreachable_refuses_connected_socket():
    net, a, b = Network.two_hosts()
    tx = udp_socket(a)
    tx.connect(("10.0.0.2", 9))
    tx.send(b"anyone?")
    assert net.run_until(lambda: bool(tx._sk.err), 1.0)
    assert b.counters.get("UdpNoPorts") == 1
    with pytest.raises(ConnectionRefusedError):
        tx.recv(10)


def test_broadcast_reaches_every_host_on_the_segment():
    net, hosts, _ = Network.star(4)
    receivers = [udp_socket(h, port=8000) for h in hosts[1:]]
    tx = udp_socket(hosts[0])
    for target in ("<broadcast>", "10.0.0.255"):
        with pytest.raises(OSError) as info:
            tx.sendto(b"x", (target, 8000))
        assert info.value.errno == errno.EACCES
    tx.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
    tx.sendto(b"hello all", ("10.0.0.255", 8000))
    assert net.run_until(lambda: all(r._sk.has_data() for r in receivers), 1.0)
    assert [r.recv(100) for r in receivers] == [b"hello all"] * 3


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_multicast_delivers_to_members_only(family):
    net, hosts, _ = Network.star(4)
    group = "239.1.2.3" if family == socket.AF_INET else "ff15::1:2"
    group_bytes = socket.inet_pton(family, group)
    members, outsider = [], None
    for index, host in enumerate(hosts[1:]):
        sock = udp_socket(host, family, 9000)
        if index < 2:
            if family == socket.AF_INET:
                sock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP,
                                group_bytes + socket.inet_aton("0.0.0.0"))
            else:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_JOIN_GROUP,
                                group_bytes + (0).to_bytes(4, "little"))
            members.append(sock)
        else:
            outsider = sock
    net.run(0.1)
    report = "IgmpOutReports" if family == socket.AF_INET else "Icmp6OutMLDv2Reports"
    assert all(h.counters.get(report) == 1 for h in hosts[1:3])
    tx = udp_socket(hosts[0], family)
    tx.sendto(b"to the group", (group, 9000))
    assert net.run_until(lambda: all(m._sk.has_data() for m in members), 1.0)
    assert [m.recv(100) for m in members] == [b"to the group"] * 2
    net.run(0.1)
    assert outsider is not None and not outsider._sk.has_data()


def test_receive_buffer_overflow_is_counted():
    net, a, b = Network.two_hosts()
    rx = udp_socket(b, port=9100)
    rx.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # doubled to 8192
    tx = udp_socket(a)
    for _ in range(20):
        tx.sendto(b"z" * 1000, ("10.0.0.2", 9100))
    net.run(0.5)
    received = 0
    while True:
        try:
            rx.recv(2000)
        except BlockingIOError:
            break
        received += 1
    drops = b.counters.get("UdpRcvbufErrors")
    assert received + drops == 20
    assert 0 < received < 20


@pytest.mark.parametrize("option,knob", [(socket.SO_RCVBUF, "rmem_max"),
                                          (socket.SO_SNDBUF, "wmem_max")])
def test_udp_buffer_sizes_are_capped_by_the_core_sysctls(option, knob):
    """SO_RCVBUF / SO_SNDBUF ask for at most net.core.rmem_max / wmem_max, then double
    it, as Linux; a host tuned higher grants more."""
    for cap in (212992, 1 << 22):
        net = Network(tuning=Tuning(**{knob: cap}))
        sock = net.host("a").socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, option, 1 << 23)
        assert sock.getsockopt(socket.SOL_SOCKET, option) == 2 * cap
        sock.setsockopt(socket.SOL_SOCKET, option, 65536)
        assert sock.getsockopt(socket.SOL_SOCKET, option) == 131072
        sock.close()
        net.close()


def test_reuseport_group_spreads_flows_and_keeps_them_sticky():
    net, hosts, _ = Network.star(5)
    server = hosts[0]
    group = []
    for _ in range(3):
        sock = server.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.bind(("", 9200))
        sock.setblocking(False)
        group.append(sock)
    senders = [udp_socket(h) for h in hosts[1:]]
    for round_ in range(3):
        for sender in senders:
            sender.sendto(b"r%d" % round_, ("10.0.0.1", 9200))
    net.run(0.5)
    owner = {}
    for index, sock in enumerate(group):
        while True:
            try:
                _, source = sock.recvfrom(100)
            except BlockingIOError:
                break
            owner.setdefault(source, set()).add(index)
    assert len(owner) == 4
    assert all(len(members) == 1 for members in owner.values())  # each flow sticks


# -- bad input ---------------------------------------------------------------------------------


def test_garbage_frames_are_counted_drops():
    net, a, b = Network.two_hosts()
    rx = udp_socket(b, port=9300)
    iface = b.interface("eth0")
    mac = iface.mac
    junk = [
        b"",
        b"\x01",
        mac + b"\x02" * 6 + b"\x08\x00",  # IPv4 ethertype, no header
        mac + b"\x02" * 6 + b"\x08\x00" + b"\x45" + b"\x00" * 30,  # bad checksum/length
        mac + b"\x02" * 6 + b"\x08\x00" + b"\x4f" + b"\xff" * 100,
        mac + b"\x02" * 6 + b"\x86\xdd" + b"\x60" + b"\x00" * 20,  # truncated IPv6
        mac + b"\x02" * 6 + b"\x08\x06" + b"\x00" * 10,  # short ARP
    ]
    for frame in junk:
        b.receive(iface, frame)
    net.run(0.1)
    counters = b.counters.snapshot()
    assert counters.get("RcunetRxExceptions", 0) == 0
    assert counters.get("RcunetEthInErrors", 0) >= 2
    assert counters.get("IpInHdrErrors", 0) + counters.get("IpInTruncatedPkts", 0) >= 2
    # the Host still works
    udp_socket(a).sendto(b"still alive", ("10.0.0.2", 9300))
    assert net.run_until(readable(rx), 1.0)


def test_bad_udp_checksum_is_dropped_on_impaired_links():
    net = Network()
    a, b = net.host("a"), net.host("b")
    from rcunet.link.impair import ImpairmentConfig

    net.link(a, b, "10.0.0.1/24", "10.0.0.2/24", impair=ImpairmentConfig(corrupt=1.0, seed=3))
    iface = b.interface("eth0")
    assert not iface.checksum_offload
    src, dst = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    good = udp.Repr(1, 9400, b"payload").build(src=src, dst=dst)
    bad = bytearray(good)
    bad[-1] ^= 0xFF
    udp_socket(b, port=9400)
    _inject(b, iface, ipv4.Repr(src, dst, ipv4.PROTO_UDP, bytes(bad)))
    net.run(0.1)
    assert b.counters.get("UdpInCsumErrors") == 1
