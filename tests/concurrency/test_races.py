"""Races fixed for free-threaded CPython, each forced with a Schedule (no sleeps, no luck):
the test fails on the code before its fix."""

from __future__ import annotations

import errno
import select
import socket
import threading

import pytest

from rcunet.api import host_socket
from rcunet.host.network import Network
from rcunet.host.tcp.poll import POLL_LEVELS_READ
from rcunet.sync.deferred import FREE_AFTER_LOOKUP, DeferredFreeList
from rcunet.sync.hooks import Schedule, wait_until
from rcunet.sync.lock import CONTENDED
from rcunet.tables.udp_entry import MEMBERSHIP_BEFORE_PUBLISH


def test_free_racing_unregister_loses_no_object():
    defer = DeferredFreeList(defer_max=16)
    recycled: list[object] = []
    defer.register("worker", recycled.append)  # this thread is the owner
    obj = object()
    with Schedule(timeout=5.0) as sched:
        sched.pause_at(FREE_AFTER_LOOKUP, thread="freer")
        freer = threading.Thread(target=defer.free, args=(obj, "worker"), name="freer")
        freer.start()
        sched.wait_paused(FREE_AFTER_LOOKUP)  # it found the owner's queue...
        assert defer.unregister("worker") == 0  # ...which the owner drains and leaves
        sched.release(FREE_AFTER_LOOKUP)
        freer.join(5)
    assert not freer.is_alive()
    assert recycled == [obj]  # the freer saw the owner retired and recycled it itself
    assert defer.deferred.value() == defer.drained.value() == 1
    assert defer.queued("worker") == 0


def _udp_host():
    net = Network()
    a, b = net.host("a"), net.host("b")
    net.link(a, b, "10.0.0.1/24", "10.0.0.2/24")
    return net, b


G1 = bytes([239, 1, 1, 1])
G2 = bytes([239, 1, 1, 2])


def test_two_joins_on_one_socket_keep_both_memberships():
    net, b = _udp_host()
    sock = b.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sk, eth0 = sock._sk, b.interface("eth0")
    try:
        with Schedule(timeout=5.0) as sched:
            sched.pause_at(MEMBERSHIP_BEFORE_PUBLISH, thread="first")
            first = threading.Thread(target=b.udp.join_group, args=(sk, G1, eth0.ifindex),
                                     name="first")
            first.start()
            sched.wait_paused(MEMBERSHIP_BEFORE_PUBLISH)  # its copy of mc_list is built
            second = threading.Thread(target=b.udp.join_group, args=(sk, G2, eth0.ifindex),
                                      name="second")
            second.start()
            second.join(0.2)  # the socket lock keeps it out until the first has published
            sched.release(MEMBERSHIP_BEFORE_PUBLISH)
            first.join(5)
            second.join(5)
        assert set(sk.mc_list) == {G1, G2}
        assert {G1, G2} <= eth0.groups
    finally:
        net.close()


def test_a_closed_socket_cannot_join():
    net, b = _udp_host()
    sock = b.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sk, eth0 = sock._sk, b.interface("eth0")
    try:
        b.udp.close(sk)
        with pytest.raises(OSError) as err:
            b.udp.join_group(sk, G1, eth0.ifindex)
        assert err.value.errno == errno.EBADF
        assert G1 not in eth0.groups and sk.mc_list == {}
    finally:
        net.close()


def _select_readable(sock) -> bool:
    readable, _w, _x = select.select([sock.fileno()], [], [], 0)
    return bool(readable)


def test_accept_racing_a_new_child_leaves_the_listener_readable():
    """accept() took the last child and read "nothing queued" for the listener's poll
    fd; before it applies that, a handshake completes and queues a new child.  The fd
    must end readable: a selectors server that missed it would never accept the client
    (a stale level applied after the fresh one is a lost wake-up)."""
    net = Network(threaded=True)
    a, b = net.host("a"), net.host("b")
    # inline: the connector's own thread runs b's input, so it is the thread that
    # queues the child and refreshes the listener's poll fd
    net.link(a, b, "10.0.0.1/24", "10.0.0.2/24", inline_rx=True)
    net.start()
    srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("10.0.0.2", 7300))
    srv.listen(8)
    srv.setblocking(False)
    assert not _select_readable(srv)  # fileno() made the poll fd: levels are kept now
    clients = [a.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(2)]
    clients[0].connect(("10.0.0.2", 7300))
    assert _select_readable(srv)
    accepted: list[object] = []
    try:
        with Schedule(timeout=10.0) as sched:
            sched.pause_at(POLL_LEVELS_READ, thread="acceptor")
            sched.pause_at(CONTENDED, thread="connector")
            acceptor = threading.Thread(target=lambda: accepted.append(srv.accept()),
                                        name="acceptor")
            acceptor.start()
            sched.wait_paused(POLL_LEVELS_READ)  # read: no child queued
            connector = threading.Thread(target=clients[1].connect,
                                         args=(("10.0.0.2", 7300),), name="connector")
            connector.start()
            # the new child's wake-up either applied its level already or waits for
            # the poll fd's lock the acceptor holds
            wait_until(lambda: not connector.is_alive() or sched.paused(CONTENDED) > 0,
                       timeout=10.0, what="the connector to queue its child")
            sched.release(POLL_LEVELS_READ)
            acceptor.join(10)
            sched.release(CONTENDED)
            connector.join(10)
        assert not acceptor.is_alive() and not connector.is_alive()
        assert len(accepted) == 1
        assert host_socket(srv).acceptq  # the second child waits to be accepted...
        assert _select_readable(srv)  # ...and select() says so
    finally:
        for sock in clients + [srv] + [child for child, _ in accepted]:
            sock.close()
        net.close()
