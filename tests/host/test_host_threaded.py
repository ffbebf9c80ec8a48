"""Threaded Hosts: receive workers, timer threads and many user threads at once.

Every datagram sent is accounted for at the end: received by the application, or counted
as dropped by a named counter (the link's ``lost``/``overflow``, the receiver's
``UdpRcvbufErrors``), none twice; after ``close()`` no socket and no bound port is left.
Static neighbour entries keep ARP off the impaired links so that every frame on them is a
test datagram.  Runs once per scheduling-jitter seed (``rcunet.sync.jitter``; the seed also
seeds the impairments), ``RCUNET_JITTER_SEEDS`` of them (default 5).
"""

from __future__ import annotations

import socket
import threading
import time

import pytest

from rcunet.host.network import Network
from rcunet.link.impair import ImpairmentConfig
from rcunet.sync.jitter import Jitter, stress_seeds
from rcunet.wire import ipv4

#: RFC 3692's protocol number for experiments: no handler of ours claims it.
EXPERIMENTAL_PROTOCOL = 253

MS = 1_000_000
SENDERS = 4
PER_SENDER = 100


def _static_neighbours(net, a, r, b):
    links = net.links
    a_eth, r_eth0 = a.interface("eth0"), r.interface("eth0")
    r_eth1, b_eth = r.interface("eth1"), b.interface("eth0")
    a.add_neighbour(a_eth, "10.1.0.1", r_eth0.mac)
    r.add_neighbour(r_eth0, "10.1.0.2", a_eth.mac)
    r.add_neighbour(r_eth1, "10.2.0.2", b_eth.mac)
    b.add_neighbour(b_eth, "10.2.0.1", r_eth1.mac)
    return links


@pytest.mark.stress
@pytest.mark.parametrize("seed", stress_seeds(), ids=lambda seed: f"jitter{seed}")
def test_udp_through_a_router_with_impairments_accounts_for_every_datagram(seed):
    with Jitter(seed) as jitter:
        _udp_through_a_router(seed)
    assert jitter.arrivals() > 0


def _udp_through_a_router(seed):
    impair = ImpairmentConfig(loss=0.03, delay=1 * MS, jitter=1 * MS, reorder=0.05,
                              reorder_delay=2 * MS, seed=11 + seed)
    net = Network(threaded=True, rx_queues=2)
    a, r, b = net.host("a"), net.host("r", forwarding=True), net.host("b")
    net.link(a, r, "10.1.0.2/24", "10.1.0.1/24", impair=impair)
    net.link(r, b, "10.2.0.1/24", "10.2.0.2/24", impair=impair)
    a.add_route("default", via="10.1.0.1")
    b.add_route("default", via="10.2.0.1")
    links = _static_neighbours(net, a, r, b)
    net.start()
    try:
        receivers = []
        for index in range(SENDERS):
            sock = b.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.bind(("", 7000 + index))
            sock.settimeout(0.05)
            receivers.append(sock)
        received: list[list[int]] = [[] for _ in range(SENDERS)]
        stop = threading.Event()

        def receive(index: int) -> None:
            sock = receivers[index]
            while not stop.is_set():
                try:
                    data = sock.recv(100)
                except TimeoutError:
                    continue
                received[index].append(int(data))

        def send(index: int) -> None:
            sock = a.socket(socket.AF_INET, socket.SOCK_DGRAM)
            for seq in range(PER_SENDER):
                sock.sendto(b"%d" % seq, ("10.2.0.2", 7000 + index))
                if seq % 50 == 0:
                    time.sleep(0.001)
            sock.close()

        readers = [threading.Thread(target=receive, args=(i,)) for i in range(SENDERS)]
        writers = [threading.Thread(target=send, args=(i,)) for i in range(SENDERS)]
        for thread in readers + writers:
            thread.start()
        for thread in writers:
            thread.join(30)

        def drops() -> int:
            link_drops = sum(l.stats().get("lost", 0) + l.stats().get("overflow", 0)
                             + l.stats().get("dropped_mtu", 0) for l in links)
            return link_drops + b.counters.get("UdpRcvbufErrors")

        expected = SENDERS * PER_SENDER
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if sum(map(len, received)) + drops() >= expected:
                break
            time.sleep(0.02)
        stop.set()
        for thread in readers:
            thread.join(5)
        total = sum(map(len, received))
        assert all(len(set(got)) == len(got) for got in received), "a datagram arrived twice"
        assert all(set(got) <= set(range(PER_SENDER)) for got in received)
        assert total + drops() == expected, (total, drops(), [l.stats() for l in links])
        assert total > expected * 0.8
        for host in (a, r, b):
            assert host.counters.get("RcunetRxExceptions") == 0
    finally:
        net.close()
    for host in (a, r, b):
        assert not any(t.is_alive() for t in host._threads), "a worker outlived close()"
        assert host.udp.sockets == set(), "a socket outlived close()"
        assert host.udp.table.entries() == [], "a port stayed bound after close()"


def test_receive_queue_is_bounded_like_netdev_max_backlog():
    """A frame flood faster than the receive worker is dropped and counted once the
    queue holds ``netdev_max_backlog`` frames."""
    from rcunet.tuning import Tuning

    net = Network(threaded=True, tuning=Tuning(netdev_max_backlog=50))
    a, b = net.host("a"), net.host("b")
    net.link(a, b, "10.0.0.1/24", "10.0.0.2/24")
    net.start()
    try:
        iface = b.interface("eth0")
        gate = threading.Event()

        def slow_handler(info, payload):
            gate.wait(5)

        # the worker stalls on the first frame, in the handler of an unassigned protocol
        b.ip.handlers[EXPERIMENTAL_PROTOCOL] = slow_handler
        packet = ipv4.Repr(src=bytes([10, 0, 0, 1]), dst=bytes([10, 0, 0, 2]),
                           protocol=EXPERIMENTAL_PROTOCOL).build()
        frame = b"\xff" * 6 + b"\x02" * 6 + b"\x08\x00" + packet
        for _ in range(500):
            b.receive(iface, frame)
        drops = b.counters.get("RcunetRxBacklogDrops")
        gate.set()
        assert 500 - 52 <= drops <= 500 - 49
    finally:
        net.close()
