"""TCP on the Host, deterministic (virtual clock, non-blocking sockets): handshake and
data both ways over IPv4 and IPv6, RST to a closed port, TIME_WAIT entries, tw reuse,
EADDRNOTAVAIL, close/shutdown semantics, options."""

from __future__ import annotations

import errno
import hashlib
import ipaddress
import socket
import struct
from dataclasses import replace

import pytest
from tcp_helpers import (
    A4,
    B4,
    B6,
    accept,
    assert_no_leaks,
    connected_pair,
    listener,
    recv_exactly,
    send_all,
    start_connect,
    time_wait_entries,
    transfer,
    wait_eof,
)

from rcunet.host.network import Network
from rcunet.host.tcp.ipopts import IP_FREEBIND
from rcunet.tables.entry import State
from rcunet.tuning import Tuning

SECOND = 1_000_000_000


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_handshake_and_data_both_ways(family: int) -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b, family)
    assert child.getpeername()[:2] == cli.getsockname()[:2]
    assert cli.getpeername()[:2] == child.getsockname()[:2]
    up = bytes(range(256)) * 800
    down = hashlib.sha256(b"down").digest() * 5000
    assert transfer(net, cli, child, up) == up
    assert transfer(net, child, cli, down) == down
    assert a.counters.get("TcpActiveOpens") == 1
    assert b.counters.get("TcpPassiveOpens") == 1
    cli.close()
    wait_eof(net, child)
    child.close()
    srv.close()
    net.run(1)
    # the active closer keeps the 4-tuple in TIME_WAIT; the passive side is gone
    assert len(time_wait_entries(a)) == 1 and not time_wait_entries(b)
    assert not b.tcp.sockets and not a.tcp.sockets
    net.run(61)
    assert_no_leaks(a, b)


def test_rst_to_closed_port_gives_econnrefused() -> None:
    net, a, b = Network.two_hosts()
    cli = start_connect(a, socket.AF_INET, B4, 9)
    net.run_until(lambda: cli._sk.conn.state.name == "CLOSED", 5)
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED
    assert b.counters.get("TcpOutRsts") == 1
    assert a.counters.get("TcpAttemptFails") == 1
    with pytest.raises(OSError) as info:
        cli.send(b"x")
    assert info.value.errno == errno.EPIPE
    cli.close()
    assert_no_leaks(a, b)


def test_time_wait_entry_and_expiry() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    port = cli.getsockname()[1]
    cli.close()
    wait_eof(net, child)
    child.close()
    net.run(1)
    tws = time_wait_entries(a)
    assert len(tws) == 1
    tw = tws[0]
    assert tw.state == State.TIME_WAIT and tw.lport == port
    assert port in a.tcp.hashinfo.bind.ports_in_use()  # TIME_WAIT keeps the port
    assert a.tcp.hashinfo.ehash.tw_count() == 1
    net.run(58)
    assert time_wait_entries(a)  # 2MSL = 60 s
    net.run(3)
    assert not time_wait_entries(a)
    assert a.tcp.hashinfo.bind.ports_in_use() == set()
    srv.close()
    assert_no_leaks(a, b)


def test_time_wait_answers_retransmitted_fin_with_ack() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    cli.close()
    wait_eof(net, child)
    child.close()
    net.run(1)
    (tw,) = time_wait_entries(a)
    from rcunet.wire import tcp

    fin = tcp.Repr(src_port=tw.fport, dst_port=tw.lport, seq=(tw.tw.rcv_nxt - 1) & 0xFFFFFFFF,
                   ack=tw.snd_nxt, flags=tcp.FIN | tcp.ACK, window=1000)
    before = a.counters.get("TcpOutSegs")
    b.tcp.transmit.segment(bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1]), fin)
    net.run(0.1)
    assert a.counters.get("TcpOutSegs") == before + 1  # the TIME_WAIT entry re-ACKed
    # b has no socket left: it answers that ACK with a RST, which ends TIME_WAIT
    # (Linux's default, tcp_rfc1337 = 0)
    assert b.counters.get("TcpOutRsts") == 1
    assert not time_wait_entries(a)
    srv.close()


def test_tw_reuse_on_connect_with_explicit_port() -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080)
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.settimeout(0)
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT keeps sk_reuse
    try:
        cli.connect((B4, 8080))
    except BlockingIOError:
        pass
    child = accept(net, srv)
    port = cli.getsockname()[1]
    cli.close()
    wait_eof(net, child)
    child.close()
    net.run(2)
    assert len(time_wait_entries(a)) == 1
    again = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    again.settimeout(0)
    again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    again.bind((A4, port))
    try:
        again.connect((B4, 8080))
    except BlockingIOError:
        pass
    assert a.counters.get("TcpExtTWRecycled") == 1
    assert not time_wait_entries(a)
    child2 = accept(net, srv)
    send_all(net, again, b"second incarnation")
    assert recv_exactly(net, child2, 18) == b"second incarnation"
    for s in (again, child2, srv):
        s.close()


def test_tw_reuse_on_ephemeral_connect() -> None:
    tuning = Tuning(ip_local_port_range=(40000, 40000), tcp_tw_reuse=1)
    net, a, b = Network.two_hosts(tuning=tuning)
    srv, cli, child = connected_pair(net, a, b)
    cli.close()
    wait_eof(net, child)
    child.close()
    net.run(2)  # past tcp_tw_reuse_delay (1 s)
    assert len(time_wait_entries(a)) == 1
    again = start_connect(a, socket.AF_INET, B4, 8080)
    assert again.getsockname()[1] == 40000
    assert a.counters.get("TcpExtTWRecycled") == 1
    child2 = accept(net, srv)
    send_all(net, child2, b"ok")
    assert recv_exactly(net, again, 2) == b"ok"
    for s in (again, child2, srv):
        s.close()


def test_connect_eaddrnotavail_with_narrow_port_range() -> None:
    tuning = Tuning(ip_local_port_range=(40000, 40001), tcp_tw_reuse=0)
    net, a, b = Network.two_hosts(tuning=tuning)
    srv = listener(b, socket.AF_INET, B4, 8080)
    first = start_connect(a, socket.AF_INET, B4, 8080)
    second = start_connect(a, socket.AF_INET, B4, 8080)
    assert {first.getsockname()[1], second.getsockname()[1]} == {40000, 40001}
    third = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    third.settimeout(0)
    with pytest.raises(OSError) as info:
        third.connect((B4, 8080))
    assert info.value.errno == errno.EADDRNOTAVAIL
    # another destination port is another 4-tuple: the same source ports are free for it
    other = listener(b, socket.AF_INET, B4, 8081)
    fourth = start_connect(a, socket.AF_INET, B4, 8081)
    assert fourth.getsockname()[1] in (40000, 40001)
    for s in (first, second, third, fourth, srv, other):
        s.close()


def test_shutdown_write_half_close() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    send_all(net, cli, b"request")
    cli.shutdown(socket.SHUT_WR)
    assert recv_exactly(net, child, 7) == b"request"
    wait_eof(net, child)
    send_all(net, child, b"response after the peer's FIN")
    assert recv_exactly(net, cli, 29) == b"response after the peer's FIN"
    with pytest.raises(BrokenPipeError):
        cli.send(b"more")
    child.close()
    wait_eof(net, cli)
    cli.close()
    srv.close()
    net.run(1)
    assert a.tcp.sockets == set() and b.tcp.sockets == set()


def test_linger_zero_close_sends_rst() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_LINGER, 8) == struct.pack("ii", 1, 0)
    cli.close()
    net.run(0.1)
    with pytest.raises(ConnectionResetError):
        child.recv(10)
    assert a.counters.get("TcpOutRsts") == 1
    assert not time_wait_entries(a)  # an abortive close leaves no TIME_WAIT
    child.close()
    srv.close()
    net.run(0.1)
    assert_no_leaks(a, b)


def test_close_with_unread_data_resets() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    send_all(net, cli, b"never read")
    net.run(0.1)
    child.close()
    net.run(0.1)
    with pytest.raises(ConnectionResetError):
        cli.recv(10)
    assert b.counters.get("TcpExtTCPAbortOnClose") == 1
    cli.close()
    srv.close()


def test_socket_errors_as_linux() -> None:
    net, a, b = Network.two_hosts()
    s = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.settimeout(0)
    with pytest.raises(OSError) as info:
        s.recv(1)
    assert info.value.errno == errno.ENOTCONN
    with pytest.raises(BrokenPipeError):
        s.send(b"x")
    with pytest.raises(OSError) as info:
        s.shutdown(socket.SHUT_WR)
    assert info.value.errno == errno.ENOTCONN
    with pytest.raises(OSError) as info:
        s.accept()
    assert info.value.errno == errno.EINVAL
    s.bind((A4, 5000))
    with pytest.raises(OSError) as info:
        s.bind((A4, 5001))
    assert info.value.errno == errno.EINVAL
    t = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OSError) as info:
        t.bind((A4, 5000))
    assert info.value.errno == errno.EADDRINUSE
    with pytest.raises(OSError) as info:
        t.bind(("10.9.9.9", 0))
    assert info.value.errno == errno.EADDRNOTAVAIL
    srv, cli, child = connected_pair(net, a, b, port=7000)
    with pytest.raises(OSError) as info:
        cli.connect((B4, 7000))
    assert info.value.errno == errno.EISCONN
    with pytest.raises(OSError) as info:
        cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 10)
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError) as info:
        cli.setsockopt(socket.SOL_SOCKET, 9999, 1)
    assert info.value.errno == errno.ENOPROTOOPT
    for sock in (s, t, srv, cli, child):
        sock.close()


def test_socket_options_round_trip_and_reach_the_connection() -> None:
    net, a, b = Network.two_hosts()
    s = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    keepalive = (socket.TCP_KEEPIDLE, socket.TCP_KEEPINTVL, socket.TCP_KEEPCNT)
    # unset TCP_KEEP* read back as the sysctls (tcp_keepalive_time/intvl/probes)
    assert [s.getsockopt(socket.IPPROTO_TCP, opt) for opt in keepalive] == [7200, 75, 9]
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 1000)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32768)
    assert s.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) == 131072  # doubled, as Linux
    assert s.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) == 65536
    assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) == 1000
    assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG, 4) == struct.pack("i", 1000)
    srv = listener(b, socket.AF_INET, B4, 8080)
    s.settimeout(0)
    try:
        s.connect((B4, 8080))
    except BlockingIOError:
        pass
    child = accept(net, srv)
    assert net.run_until(lambda: s._sk.conn.state.synchronized, 2)
    assert s.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG) <= 1000
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 10)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 2)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
    conn = s._sk.conn
    assert conn.options.nodelay and conn.options.keepalive
    assert conn.options.keepalive_time == 10 * SECOND
    # the peer vanishes: keepalive probes go unanswered and the connection times out
    b.interface("eth0").up = False  # nothing b sends leaves
    net.run(10 + 3 * 2 + 3)
    assert a.counters.get("TcpExtTCPKeepAlive") == 3
    with pytest.raises(TimeoutError):
        s.recv(1)
    s.close()
    child.close()
    srv.close()


SO_MARK, SO_ACCEPTCONN, TCP_NOTSENT_LOWAT, TCP_INQ = 36, 30, 25, 36


@pytest.mark.parametrize(("level", "option", "value", "read_back"), [
    (socket.SOL_SOCKET, socket.SO_REUSEADDR, 5, 1),
    (socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1, 1),
    (socket.SOL_SOCKET, SO_MARK, 7, 7),
    (socket.SOL_SOCKET, SO_MARK, -1, -1),  # a u32, read back as the C int: as Linux
    (socket.IPPROTO_TCP, socket.TCP_NODELAY, 3, 1),
    (socket.IPPROTO_TCP, socket.TCP_CORK, 1, 1),
    (socket.IPPROTO_TCP, TCP_INQ, 1, 1),
    (socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, 16384, 16384),
    (socket.IPPROTO_TCP, TCP_NOTSENT_LOWAT, -1, -1),
    (socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, 2500, 2500),
    (socket.IPPROTO_TCP, socket.TCP_SYNCNT, 3, 3),
    (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 127, 127),
])
def test_int_options_read_back_as_on_linux(level: int, option: int, value: int,
                                           read_back: int) -> None:
    """What the real kernel gives for the same calls (setsockopt, then getsockopt with and
    without a buffer length)."""
    _net, a, _b = Network.two_hosts()
    s = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(level, option, value)
    assert s.getsockopt(level, option) == read_back
    assert s.getsockopt(level, option, 4) == struct.pack("i", read_back)
    s.close()


def test_option_errors_as_on_linux() -> None:
    _net, a, _b = Network.two_hosts()
    s = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    assert s.getsockopt(socket.SOL_SOCKET, SO_ACCEPTCONN) == 0
    s.bind((A4, 6000))
    s.listen()
    assert s.getsockopt(socket.SOL_SOCKET, SO_ACCEPTCONN) == 1
    for level, option, value, code in [
        (socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 128, errno.EINVAL),  # 1..127
        (socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, -1, errno.EINVAL),
        (socket.IPPROTO_TCP, 9999, b"xx", errno.EINVAL),  # too short, whatever the option
        (socket.IPPROTO_TCP, 9999, 1, errno.ENOPROTOOPT),
        (socket.SOL_SOCKET, 9999, 1, errno.ENOPROTOOPT),
    ]:
        with pytest.raises(OSError) as info:
            s.setsockopt(level, option, value)
        assert info.value.errno == code, (option, value)
    with pytest.raises(OSError) as info:
        s.getsockopt(socket.IPPROTO_TCP, 9999)
    assert info.value.errno == errno.ENOPROTOOPT
    s.close()


def test_ipv6_listener_accepts_ipv4_clients_v4_mapped() -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET6, "::", 8080)
    cli = start_connect(a, socket.AF_INET, B4, 8080)
    child = accept(net, srv)
    assert ipaddress.ip_address(child.getpeername()[0]).ipv4_mapped == \
        ipaddress.ip_address(A4)
    send_all(net, cli, b"mapped")
    assert recv_exactly(net, child, 6) == b"mapped"
    send_all(net, child, b"back")
    assert recv_exactly(net, cli, 4) == b"back"
    for s in (cli, child, srv):
        s.close()


def test_ipv6_data_large_transfer_hash() -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b, socket.AF_INET6)
    data = hashlib.sha256(b"v6").digest() * 40000  # 1.28 MB
    assert hashlib.sha256(transfer(net, child, cli, data)).digest() == \
        hashlib.sha256(data).digest()
    assert child.getsockname()[0] == B6
    for s in (cli, child, srv):
        s.close()


def test_accept_queue_overflow_drops_then_recovers() -> None:
    net, a, b = Network.two_hosts(tuning=Tuning(tcp_syncookies=0))
    srv = listener(b, socket.AF_INET, B4, 8080, backlog=1)
    first = start_connect(a, socket.AF_INET, B4, 8080)
    net.run(0.1)
    second = start_connect(a, socket.AF_INET, B4, 8080)
    net.run(0.1)
    third = start_connect(a, socket.AF_INET, B4, 8080)
    net.run(0.1)
    assert len(srv._sk.acceptq) == 2  # full is "more than backlog", as Linux
    assert b.counters.get("TcpExtListenOverflows") >= 1
    assert third._sk.conn.state.name == "SYN_SENT"
    children = [accept(net, srv), accept(net, srv)]
    child3 = accept(net, srv, timeout=10)  # the SYN retransmission gets in now
    assert child3.getpeername() == third.getsockname()
    for s in (first, second, third, *children, child3, srv):
        s.close()


def test_syn_cookies_when_the_syn_queue_overflows() -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080, backlog=1)
    clients = [start_connect(a, socket.AF_INET, B4, 8080) for _ in range(3)]
    net.run(0.1)
    # SYN 1 took the one SYN-queue slot; SYNs 2 and 3 were answered with cookies
    assert b.counters.get("TcpExtSyncookiesSent") == 2
    assert b.counters.get("TcpExtSyncookiesRecv") == 1
    # the third cookie ACK met a full accept queue and was dropped (as Linux does); the
    # client believes it is connected, and its first data segment completes it later
    assert b.counters.get("TcpExtListenOverflows") == 1
    children = [accept(net, srv), accept(net, srv)]
    for cli in clients:
        send_all(net, cli, b"cookie ok")
    children.append(accept(net, srv))
    by_port = {c.getpeername()[1]: c for c in children}
    assert sorted(by_port) == sorted(c.getsockname()[1] for c in clients)
    for cli in clients:
        assert recv_exactly(net, by_port[cli.getsockname()[1]], 9) == b"cookie ok"
    assert b.counters.get("TcpExtSyncookiesRecv") == 2
    for s in (*clients, *children, srv):
        s.close()


def test_syncookies_always_mode() -> None:
    net, a, b = Network.two_hosts(tuning=Tuning(tcp_syncookies=2))
    srv = listener(b, socket.AF_INET, B4, 8080)
    cli = start_connect(a, socket.AF_INET, B4, 8080)
    child = accept(net, srv)
    assert b.counters.get("TcpExtSyncookiesSent") == 1
    assert b.counters.get("TcpExtSyncookiesRecv") == 1
    assert len(transfer(net, child, cli, b"x" * 100000)) == 100000
    for s in (cli, child, srv):
        s.close()


def test_listener_close_resets_queued_children() -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080)
    cli = start_connect(a, socket.AF_INET, B4, 8080)
    net.run(0.1)
    assert len(srv._sk.acceptq) == 1
    srv.close()
    net.run(0.1)
    with pytest.raises(ConnectionResetError):
        cli.recv(1)
    cli.close()
    assert_no_leaks(a, b)


def test_legacy_global_lock_mode_works_the_same() -> None:
    net, a, b = Network.two_hosts(tuning=Tuning.legacy())
    srv, cli, child = connected_pair(net, a, b)
    data = b"legacy" * 20000
    assert transfer(net, cli, child, data) == data
    for s in (cli, child, srv):
        s.close()
    net.run(70)
    assert_no_leaks(a, b)


def test_recv_frees_buffers_to_their_pool() -> None:
    # lock_stat: the owner sections are timed (lock_stats() below)
    for tuning in (Tuning(lock_stat=True), Tuning(tcp_defer_free=False, lock_stat=True)):
        net, a, b = Network.two_hosts(tuning=tuning)
        srv, cli, child = connected_pair(net, a, b)
        send_all(net, cli, b"z" * 50000)
        recv_exactly(net, child, 50000)
        small, _large = b.tcp.buffers.pools()
        assert small.allocated.value() > 30
        # every consumed buffer went back (one thread: the owner frees at once)
        assert small.free_count() + len(child._sk.rx_skbs) >= small.created.value() - 1
        assert child._sk.lock_stats()["holds"] > 0
        for s in (cli, child, srv):
            s.close()


def test_connect_again_after_a_refused_attempt() -> None:
    net, a, b = Network.two_hosts()
    cli = start_connect(a, socket.AF_INET, B4, 8080)
    net.run(0.1)
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == errno.ECONNREFUSED
    srv = listener(b, socket.AF_INET, B4, 8080)
    try:
        cli.connect((B4, 8080))
    except BlockingIOError:
        pass
    child = accept(net, srv)
    assert transfer(net, cli, child, b"second try") == b"second try"
    for s in (cli, child, srv):
        s.close()


def test_syn_to_a_server_time_wait_starts_a_new_incarnation() -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080)
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.settimeout(0)
    cli.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    cli.bind((A4, 45000))
    try:
        cli.connect((B4, 8080))
    except BlockingIOError:
        pass
    child = accept(net, srv)
    child.close()  # the server closes first: TIME_WAIT is on b
    wait_eof(net, cli)
    cli.close()
    net.run(2)
    (tw,) = time_wait_entries(b)
    again = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    again.settimeout(0)
    again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    again.bind((A4, 45000))  # the same 4-tuple as the connection b still remembers
    try:
        again.connect((B4, 8080))
    except BlockingIOError:
        pass
    child2 = accept(net, srv)
    assert not time_wait_entries(b)  # the newer SYN (timestamps) ended TIME_WAIT
    assert child2._sk.conn.tcb.iss == (tw.snd_nxt + 65537) & 0xFFFFFFFF
    assert transfer(net, again, child2, b"new incarnation") == b"new incarnation"
    for s in (again, child2, srv):
        s.close()


def test_set_tuning_reaches_the_tables() -> None:
    net, a, b = Network.two_hosts()
    a.set_tuning(replace(a.tuning, ip_local_port_range=(50000, 50000)))
    s = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.bind((A4, 0))
    assert s.getsockname()[1] == 50000
    t = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    with pytest.raises(OSError) as info:
        t.bind((A4, 0))
    assert info.value.errno == errno.EADDRINUSE
    s.close()
    t.close()


def test_connection_options_follow_sysctls_and_socket_options_after_a_memo_fill() -> None:
    """The Options a Host's connections open with are remembered per combination
    (connopts.ConnOptionsMemo): a sysctl write (a new Tuning) or another socket option
    after connections filled the memo reaches the next connection, on both ends, and
    going back to the first combination gives the first Options again."""
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080)

    def pair(cli: object = None) -> tuple[object, object]:
        cli = cli if cli is not None else start_connect(a, socket.AF_INET, B4, 8080)
        child = accept(net, srv)
        return cli._sk.conn.options, child._sk.conn.options

    first = pair()
    assert pair() == first  # the same inputs: equal Options, from the memo
    assert first[0].sndbuf_max == a.tuning.tcp_wmem[2] and not first[0].nodelay
    for host in (a, b):
        host.set_tuning(replace(host.tuning, tcp_wmem=(4096, 16384, 1 << 20),
                                tcp_notsent_lowat=12345, tcp_keepalive_time=99))
    cli_options, child_options = pair()
    for options in (cli_options, child_options):
        assert (options.sndbuf_max, options.notsent_lowat) == (1 << 20, 12345)
        assert options.keepalive_time == 99 * SECOND
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    cli.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 7)
    cli.settimeout(0)
    assert cli.connect_ex((B4, 8080)) == errno.EINPROGRESS
    options = pair(cli)[0]
    assert options.nodelay and options.keepalive_time == 7 * SECOND
    assert options.sndbuf_max == 1 << 20
    assert pair() == (cli_options, child_options)


@pytest.mark.parametrize(("family", "foreign"), [
    (socket.AF_INET, "198.51.100.7"), (socket.AF_INET6, "2001:db8::7")])
def test_bind_to_a_foreign_address_needs_ip_freebind(family: int, foreign: str) -> None:
    """inet_bind / __inet6_bind: EADDRNOTAVAIL for an address no interface has,
    unless IP_FREEBIND is set (inet_addr_valid_or_nonlocal, ipv6_can_nonlocal_bind)."""
    _net, a, _b = Network.two_hosts()
    plain = a.socket(family, socket.SOCK_STREAM)
    with pytest.raises(OSError) as info:
        plain.bind((foreign, 8080))
    assert info.value.errno == errno.EADDRNOTAVAIL
    free = a.socket(family, socket.SOCK_STREAM)
    free.setsockopt(socket.IPPROTO_IP, IP_FREEBIND, 1)
    assert free.getsockopt(socket.IPPROTO_IP, IP_FREEBIND) == 1
    free.bind((foreign, 8080))
    assert free.getsockname()[:2] == (foreign, 8080)
    for s in (plain, free):
        s.close()
