"""The seed mechanisms on the TCP socket layer, deterministic where possible:

* seed 004: a child is invisible to accept() until its handshake completed; legacy mode
  takes the global ``tcbinfo_lock`` on accept / SYN / teardown, modern never does;
* seed 001: buffers consumed by recv() on a user thread go back to the receive worker
  that allocated them (deferred) or are freed in place under the lock (legacy);
* TIME_WAIT bucket limit, SO_REUSEPORT listeners, SYN timeout, routed paths, loopback.
"""

from __future__ import annotations

import errno
import socket
import threading
from dataclasses import replace
from typing import Any

import pytest
from tcp_helpers import (
    B4,
    accept,
    connected_pair,
    listener,
    recv_exactly,
    spend_quickacks,
    start_connect,
    time_wait_entries,
    transfer,
    wait_eof,
)

from rcunet.core.tcp import State as CState
from rcunet.host.network import Network
from rcunet.host.tcp import TCBINFO_LOCK
from rcunet.host.tcp.life import CLOSE, FINISHED
from rcunet.host.tcp.sock import TIMER_DEFERRED
from rcunet.sync import hooks, lock, lockstat
from rcunet.tables.entry import State
from rcunet.tuning import Tuning
from rcunet.wire import tcp


def test_child_is_not_acceptable_before_the_handshake_completes() -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080)
    seen: list[tuple[str, Any]] = []

    def before_hash() -> None:
        # the child exists (SYN_RECV) but accept() must not see it
        with pytest.raises(BlockingIOError):
            srv.accept()
        seen.append(("before_hash", len(srv._sk.embryos)))

    def before_publish() -> None:
        child = srv._sk.embryos and next(iter(srv._sk.embryos))
        assert not srv._sk.acceptq
        with pytest.raises(BlockingIOError):
            srv.accept()
        seen.append(("before_publish", child))

    with hooks.installed({"tcp.child.before_hash": before_hash,
                          "tcp.child.before_publish": before_publish}):
        cli = start_connect(a, socket.AF_INET, B4, 8080)
        child = accept(net, srv)
    assert [name for name, _ in seen] == ["before_hash", "before_publish"]
    assert seen[0][1] == 1  # counted in the SYN queue before it is hashed
    # when published, the child was complete: identity, port and ESTABLISHED
    assert child.getpeername() == cli.getsockname()
    assert child._sk.state == State.ESTABLISHED and child._sk.tb is not None
    assert srv._sk.syn_qlen == 0 and not srv._sk.embryos
    for s in (cli, child, srv):
        s.close()


@pytest.mark.parametrize("modern", [True, False])
def test_global_lock_only_in_legacy_mode(modern: bool) -> None:
    tuning = Tuning() if modern else replace(Tuning(), accept_no_global_lock=False)
    net, a, b = Network.two_hosts(tuning=tuning)
    with lockstat.collecting():
        srv, cli, child = connected_pair(net, a, b)
        cli.close()
        wait_eof(net, child)
        child.close()
        net.run(1)
        taken = lockstat.class_stats(TCBINFO_LOCK).acquisitions
    if modern:
        assert taken == 0
    else:
        assert taken >= 3  # SYN processing, accept, teardown
    srv.close()


@pytest.mark.parametrize("defer", [True, False])
def test_recv_returns_buffers_to_the_allocating_worker(defer: bool) -> None:
    tuning = replace(Tuning(), tcp_defer_free=defer)
    net, a, b = Network.two_hosts(threaded=True, tuning=tuning)
    net.start()
    try:
        srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.bind((B4, 8080))
        srv.listen(4)
        cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        cli.connect((B4, 8080))
        child, _ = srv.accept()
        payload = b"d" * 3_000_000
        sender = threading.Thread(target=cli.sendall, args=(payload,))
        sender.start()
        got = 0
        while got < len(payload):  # this (user) thread consumes the worker's buffers
            got += len(child.recv(65536))
        sender.join(10)
        deferred = b.tcp.deferred
        pools = [p for p in _all_pools(b) if p.allocated.value()]
        foreign = sum(p.recycled_foreign.value() for p in pools)
        if defer:
            assert deferred.deferred.value() > 100  # queued back to the worker...
            assert foreign == 0  # ...which recycled them itself
        else:
            assert deferred.deferred.value() == 0
            assert foreign > 100  # freed by the user thread, inside its lock section
        for s in (cli, child, srv):
            s.close()
    finally:
        net.close()


def _all_pools(host: Any) -> list[Any]:
    owners = host.tcp.deferred._owners  # test introspection
    return [entry.recycle.__self__ for entry in owners.values()]


def test_time_wait_bucket_limit() -> None:
    net, a, b = Network.two_hosts(tuning=Tuning(tcp_max_tw_buckets=0))
    srv, cli, child = connected_pair(net, a, b)
    cli.close()
    wait_eof(net, child)
    child.close()
    net.run(1)
    assert not time_wait_entries(a)
    assert a.counters.get("TcpExtTCPTimeWaitOverflow") == 1
    assert a.tcp.hashinfo.bind.ports_in_use() == set()
    srv.close()


def test_a_reset_racing_time_wait_entry_is_dropped() -> None:
    """Between ``post`` taking a socket's TIME_WAIT teardown and the hashdance, the
    socket is still hashed: another thread's segment may reach its engine.  A RST there
    (the peer answering our ACK of its retransmitted FIN) asks for a close as well; the
    socket is torn down once, into TIME_WAIT (a CI failure on 3.13t: the close released
    the port, then the hashdance raised EINVAL in the receive worker)."""
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk = child._sk
    layer = b.tcp
    raced: list[str] = []

    def rst_lands_first() -> None:
        # the child's own teardown into TIME_WAIT (FINISHED taken, still hashed): the
        # first one to reach this point once the child is FINISHED
        if raced or not sk.life & FINISHED or sk.conn.state is not CState.TIME_WAIT:
            return
        tcb = sk.conn.tcb
        rst = tcp.Repr(src_port=cli._sk.lport, dst_port=sk.lport, seq=tcb.rcv_nxt,
                       ack=0, flags=tcp.RST, window=0)
        layer.demux.deliver(sk, rst, None)  # what another receive thread would do now
        raced.append(sk.conn.state.name)

    with hooks.installed({"tcp.finish.before_unhash": rst_lands_first}):
        child.close()  # the server closes first: it will hold the TIME_WAIT
        wait_eof(net, cli)
        cli.close()
        net.run(1)
    assert raced == ["CLOSED"]  # the engine did take the RST
    assert len(time_wait_entries(b)) == 1 and sk.state == State.CLOSE
    assert b.counters.get("RcunetRxExceptions") == 0
    srv.close()
    assert b.tcp.hashinfo.bind.ports_in_use() == {8080}  # the TIME_WAIT holds it
    b.tcp.close_all()
    assert b.tcp.hashinfo.bind.ports_in_use() == set() and not b.tcp.sockets


def test_reuseport_listeners_share_connections() -> None:
    net, a, b = Network.two_hosts()
    listeners = []
    for _ in range(2):
        srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.settimeout(0)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        srv.bind((B4, 8080))
        srv.listen(64)
        listeners.append(srv)
    third = b.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OSError) as info:
        third.bind((B4, 8080))  # without SO_REUSEPORT the port is taken
    assert info.value.errno == errno.EADDRINUSE
    clients = [start_connect(a, socket.AF_INET, B4, 8080) for _ in range(16)]
    net.run(0.5)
    counts = [len(srv._sk.acceptq) for srv in listeners]
    assert sum(counts) == 16 and all(counts)
    for s in (*clients, *listeners, third):
        s.close()


def test_syn_timeout_gives_etimedout() -> None:
    net, a, b = Network.two_hosts()
    b.ip.handlers[6] = lambda info, payload: None  # b answers ARP but drops TCP
    cli = start_connect(a, socket.AF_INET, B4, 8080)
    net.run(200)  # 1+2+4+8+16+32+64 s of SYN retransmissions
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ETIMEDOUT
    assert a.counters.get("TcpExtTCPSynRetrans") == 6
    cli.close()
    assert not a.tcp.sockets


def test_unresolvable_neighbour_gives_ehostunreach() -> None:
    net, a, b = Network.two_hosts()
    b.interface("eth0").up = False  # b is gone: nothing it sends leaves
    cli = start_connect(a, socket.AF_INET, B4, 8080)
    net.run(30)
    # ARP fails; the local host-unreachable error aborts the SYN_SENT socket (Linux)
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.EHOSTUNREACH
    cli.close()
    assert not a.tcp.sockets


def test_routed_path_and_loopback() -> None:
    net, a, r, b = Network.routed()
    srv = listener(b, socket.AF_INET, "10.2.0.2", 8080)
    cli = start_connect(a, socket.AF_INET, "10.2.0.2", 8080)
    child = accept(net, srv)
    data = bytes(range(256)) * 2000
    assert transfer(net, cli, child, data) == data
    assert b.counters.get("TcpInCsumErrors") == 0
    # loopback on one host: checksums are offloaded, data still intact
    lsrv = listener(a, socket.AF_INET, "127.0.0.1", 9000)
    lcli = start_connect(a, socket.AF_INET, "127.0.0.1", 9000)
    lchild = accept(net, lsrv)
    assert lcli._sk.tx_csum_offload and not cli._sk.tx_csum_offload
    assert transfer(net, lchild, lcli, data) == data
    for s in (cli, child, srv, lcli, lchild, lsrv):
        s.close()


def test_segments_to_an_owned_socket_wait_in_the_backlog() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk = child._sk
    sk.sl.lock_sock()  # a user thread owns the socket (reference §5.1)
    try:
        cli.send(b"queued while owned")
        net.run(0.01)
        assert len(sk.sl.backlog) == 1 and sk.conn.readable == 0
    finally:
        sk.sl.release_sock()  # processes the backlog before giving up ownership
    assert sk.conn.readable == 18 and not sk.sl.backlog
    assert sk.lock_stats()["backlog_max_bytes"] >= 18
    for s in (cli, child, srv):
        s.close()


def test_timer_firing_while_owned_runs_at_release() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk = child._sk
    spend_quickacks(child)
    cli.send(b"one segment: the ACK is delayed")
    net.run(0.005)
    assert sk.conn.timers.delack_at is not None
    delayed = b.counters.get("TcpExtDelayedACKs")
    sk.sl.lock_sock()
    try:
        net.run(0.1)  # the delayed-ACK timer fires while the socket is owned
        assert sk.sl.deferred == TIMER_DEFERRED
        assert b.counters.get("TcpExtDelayedACKs") == delayed
    finally:
        sk.sl.release_sock()
    sk.post()
    assert b.counters.get("TcpExtDelayedACKs") == delayed + 1  # exactly once, at release
    net.run(0.1)
    assert b.counters.get("TcpExtDelayedACKs") == delayed + 1
    for s in (cli, child, srv):
        s.close()


def test_post_leaves_a_teardown_another_thread_claimed_first() -> None:
    """post() looks for a teardown with no lock, then claims it under slock: when another
    thread claimed it in between (here: at the lock's acquire point), post does nothing.
    Compiled, a re-read that kept the unlocked check's narrowing raised TypeError."""
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk = child._sk
    assert not sk.outbox  # nothing to flush: the next lock post takes is slock
    claims: list[object] = []

    def other_thread_claims() -> None:
        if not claims:
            claims.append(sk.teardown)
            sk.teardown = None

    sk.teardown = CLOSE
    with hooks.installed({lock.ACQUIRE: other_thread_claims}):
        sk.post()
    assert claims == [CLOSE] and sk.teardown is None
    assert not sk.life & FINISHED and sk.state == State.ESTABLISHED  # nobody tore it down
    cli.send(b"still connected")
    net.run(0.01)
    assert child.recv(100) == b"still connected"
    for s in (cli, child, srv):
        s.close()


def _syn_flood(a: Any, count: int) -> None:
    from rcunet.wire import tcp

    a.ip.handlers[6] = lambda info, payload: None  # the "clients" never complete
    for i in range(count):
        syn = tcp.Repr(src_port=20000 + i, dst_port=8080, seq=1000 * i, ack=0, flags=tcp.SYN,
                       window=65535, mss=1460)
        a.tcp.transmit.segment(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), syn)


def test_syn_queue_without_cookies_is_bounded_by_tcp_max_syn_backlog() -> None:
    net, a, b = Network.two_hosts(tuning=Tuning(tcp_syncookies=0, tcp_max_syn_backlog=8))
    srv = listener(b, socket.AF_INET, B4, 8080, backlog=100)
    _syn_flood(a, 20)
    net.run(0.01)
    # tcp_conn_request: without cookies, stop when less than a quarter of the queue is free
    assert srv._sk.syn_qlen == 7 and len(srv._sk.embryos) == 7
    assert b.counters.get("TcpExtListenDrops") == 13
    assert b.counters.get("TcpExtSyncookiesSent") == 0
    net.run(100)  # SYN,ACK retransmissions give up: the embryos leave the queue
    assert srv._sk.syn_qlen == 0 and not srv._sk.embryos
    srv.close()
    assert not b.tcp.sockets and len(b.tcp.hashinfo.ehash) == 0


def test_syn_flood_beyond_the_backlog_gets_cookies() -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080, backlog=4)
    _syn_flood(a, 20)
    net.run(0.01)
    assert srv._sk.syn_qlen == 4
    assert b.counters.get("TcpExtSyncookiesSent") == 16
    assert b.counters.get("TcpExtTCPReqQFullDoCookies") == 16
    srv.close()


def test_backlog_over_its_limit_drops_and_counts() -> None:
    from rcunet.wire import tcp

    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk = child._sk
    limit = 2 * sk.rcvbuf + sk.sndbuf // 2 + 64 * 1024  # tcp_add_backlog since 2024
    conn = cli._sk.conn
    segment = tcp.Repr(src_port=cli.getsockname()[1], dst_port=8080, seq=conn.tcb.snd_nxt,
                       ack=conn.tcb.rcv_nxt, flags=tcp.ACK, window=1000, payload=b"p" * 1400)
    sk.sl.lock_sock()
    try:
        for _ in range(limit // 1400 + 10):  # duplicates: each costs backlog space
            a.tcp.transmit.segment(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), segment)
        net.run(0.001)
        assert sk.sl.backlog_len <= limit
    finally:
        sk.sl.release_sock()
    drops = b.counters.get("TcpExtTCPBacklogDrop")
    assert drops > 0 and sk.lock_stats()["backlog_drops"] == drops
    assert recv_exactly(net, child, 1400) == b"p" * 1400  # the first copy got through
    for s in (cli, child, srv):
        s.close()


def test_tcp_to_broadcast_is_ignored() -> None:
    from rcunet.wire import tcp

    net, a, b = Network.two_hosts()
    syn = tcp.Repr(src_port=1234, dst_port=80, seq=1, ack=0, flags=tcp.SYN, window=1000)
    a.tcp.transmit.segment(bytes([10, 0, 0, 1]), b"\xff\xff\xff\xff", syn)
    net.run(0.1)
    assert b.counters.get("IpInReceives") >= 1
    assert b.counters.get("TcpInSegs") == 0 and b.counters.get("TcpOutRsts") == 0


def test_setting_tcp_nodelay_sends_what_nagle_held() -> None:
    """setsockopt(TCP_NODELAY) pushes the data Nagle was holding at once (Linux
    tcp_push_pending_frames, ``Connection.update_options``).  The host used to write the
    options into the engine beside update_options, and the held byte waited for the
    peer's delayed ACK (40 ms)."""
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    spend_quickacks(child)
    cli.send(b"a")
    assert net.run_until(lambda: child._sk.conn.tcb.rcv_nxt != child._sk.conn.tcb.irs + 1, 1)
    cli.send(b"b")  # the first byte is unacknowledged (delayed ACK): Nagle holds this one
    assert cli._sk.conn.tcb.snd_nxt == cli._sk.conn.tcb.snd_una + 1
    delayed_at = child._sk.conn.timers.delack_at
    assert delayed_at is not None
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    assert cli._sk.conn.tcb.snd_nxt == cli._sk.conn.tcb.snd_una + 2  # sent by setsockopt
    net.run(0.001)
    assert net.clock.now() < delayed_at  # before the peer's ACK could have released it
    assert child.recv(10) == b"ab"
    for s in (cli, child, srv):
        s.close()


def test_host_shutdown_spares_a_closed_connection_in_fin_wait2() -> None:
    """A Host closing (a child process's Host after its function returned) ends the
    connections its programs closed and that delivered everything, FIN included,
    without a RST: the peer still reads the data and then its EOF, as from a Linux
    host whose FIN-WAIT-2 orphan times out silently."""
    from rcunet.core.tcp import State as CState

    net, a, b = Network.two_hosts()
    _srv, cli, child = connected_pair(net, a, b)
    child.send(b"x" * 1000)
    child.close()

    def in_fin_wait2() -> bool:
        return any(sk.conn is not None and sk.conn.state is CState.FIN_WAIT_2
                   for sk in list(b.tcp.sockets))

    assert net.run_until(in_fin_wait2, 5)
    resets = b.counters.get("TcpOutRsts")
    b.tcp.close_all()
    net.run(1)
    assert b.counters.get("TcpOutRsts") == resets
    assert recv_exactly(net, cli, 1000) == b"x" * 1000
    wait_eof(net, cli)
    assert not b.tcp.sockets
