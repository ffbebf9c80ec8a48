"""TCP_MD5SIG (RFC 2385) between two Hosts: keys set with setsockopt as a BGP daemon
sets them, every segment signed and checked, and the segments Linux drops dropped and
counted under its names (TcpExtTCPMD5NotFound, TCPMD5Unexpected, TCPMD5Failure)."""

from __future__ import annotations

import errno
import socket
import struct
from typing import Any

import pytest
from tcp_helpers import A4, A6, B4, B6, accept, listener, recv_exactly, send_all, start_connect

from rcunet.core.tcp.md5 import FLAG_IFINDEX, FLAG_PREFIX, TCP_MD5SIG, TCP_MD5SIG_EXT
from rcunet.drill import frames as fr
from rcunet.host.network import Network

PORT = 1790


def md5sig(family: int, address: str, key: bytes, *, flags: int = 0, prefixlen: int = 0,
           ifindex: int = 0, keylen: int | None = None) -> bytes:
    """struct tcp_md5sig as a program packs it (sockaddr_storage, flags, prefixlen,
    keylen, ifindex, key[80])."""
    if family == socket.AF_INET:
        sockaddr = struct.pack("=HH4s", family, 0, socket.inet_pton(family, address))
    else:
        sockaddr = struct.pack("=HHI16s", family, 0, 0, socket.inet_pton(family, address))
    return struct.pack("=128sBBHi80s", sockaddr, flags, prefixlen,
                       len(key) if keylen is None else keylen, ifindex, key)


def keyed_connect(host: Any, family: int, address: str, key: bytes | None) -> Any:
    """A non-blocking connect to ADDRESS:PORT, signed with KEY for that peer (None: no key)."""
    cli = host.socket(family, socket.SOCK_STREAM)
    cli.settimeout(0)
    if key is not None:
        cli.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(family, address, key))
    try:
        cli.connect((address, PORT))
    except BlockingIOError:
        pass
    return cli


def counters(host: Any) -> dict[str, int]:
    return {k: v for k, v in host.counters.snapshot().items() if "MD5" in k}


ADDRS = {socket.AF_INET: (A4, B4), socket.AF_INET6: (A6, B6)}


@pytest.mark.parametrize("family", [socket.AF_INET, socket.AF_INET6])
def test_keyed_connection_carries_data_both_ways(family: int) -> None:
    """Both ends hold the key: the handshake and data go through, each segment's
    signature checks out, and the option's room comes off the MSS (no timestamps: a
    keyed SYN offers none)."""
    net, a, b = Network.two_hosts()
    a_addr, b_addr = ADDRS[family]
    srv = listener(b, family, b_addr, PORT)
    srv.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(family, a_addr, b"s3cret"))
    cli = keyed_connect(a, family, b_addr, b"s3cret")
    child = accept(net, srv)
    payload = bytes(range(256)) * 40
    send_all(net, cli, payload)
    assert recv_exactly(net, child, len(payload)) == payload
    send_all(net, child, payload[:3000])
    assert recv_exactly(net, cli, 3000) == payload[:3000]
    for sock in (cli, child):
        tcb = sock._sk.conn.tcb
        assert tcb.md5 and not tcb.ts_ok
    assert cli._sk.conn.tcb.snd_mss == 1460 - (0 if family == socket.AF_INET else 20) - 20
    assert counters(a) == {} and counters(b) == {}


@pytest.mark.parametrize(("client_key", "server_key", "counter"), [
    (b"one", b"two", "TcpExtTCPMD5Failure"),
    (b"one", None, "TcpExtTCPMD5Unexpected"),
    (None, b"two", "TcpExtTCPMD5NotFound"),
])
def test_a_key_mismatch_drops_the_syn_and_counts_it(client_key: bytes | None,
                                                    server_key: bytes | None,
                                                    counter: str) -> None:
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, PORT)
    if server_key is not None:
        srv.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG,
                       md5sig(socket.AF_INET, A4, server_key))
    cli = keyed_connect(a, socket.AF_INET, B4, client_key)
    assert net.run_until(lambda: counters(b).get(counter, 0) >= 2, 5)  # SYN, its retry
    with pytest.raises(BlockingIOError):
        srv.accept()
    assert set(counters(b)) == {counter}
    assert b.counters.snapshot().get("TcpOutRsts", 0) == 0  # dropped, not refused
    assert cli.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0  # still trying


def test_prefix_key_covers_a_subnet_and_the_child_copies_it() -> None:
    """TCP_MD5SIG_EXT with a /24 on the listener signs a peer in it; the child keeps the
    key for its peer alone (tcp_md5_key_copy)."""
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, PORT)
    srv.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG_EXT,
                   md5sig(socket.AF_INET, "10.0.0.0", b"k", flags=FLAG_PREFIX, prefixlen=24))
    cli = keyed_connect(a, socket.AF_INET, B4, b"k")
    child = accept(net, srv)
    (key,) = child._sk.md5_keys
    assert (key.addr, key.prefixlen, key.key) == (socket.inet_aton(A4), 32, b"k")
    assert cli._sk.md5_keys[0].prefixlen == 32  # the client's own key, for B4 alone


@pytest.mark.parametrize(("family", "optname", "build", "code"), [
    # a short struct, another family, a key over 80 bytes
    (socket.AF_INET, TCP_MD5SIG, lambda: md5sig(socket.AF_INET, B4, b"k")[:200],
     errno.EINVAL),
    (socket.AF_INET, TCP_MD5SIG, lambda: md5sig(socket.AF_INET6, B6, b"k"), errno.EINVAL),
    (socket.AF_INET6, TCP_MD5SIG, lambda: md5sig(socket.AF_INET, B4, b"k"), errno.EINVAL),
    (socket.AF_INET, TCP_MD5SIG, lambda: md5sig(socket.AF_INET, B4, b"k", keylen=81),
     errno.EINVAL),
    # a prefix longer than the address, an ifindex that is no L3 master device
    (socket.AF_INET, TCP_MD5SIG_EXT,
     lambda: md5sig(socket.AF_INET, B4, b"k", flags=FLAG_PREFIX, prefixlen=33), errno.EINVAL),
    (socket.AF_INET6, TCP_MD5SIG_EXT,
     lambda: md5sig(socket.AF_INET6, B6, b"k", flags=FLAG_PREFIX, prefixlen=129),
     errno.EINVAL),
    (socket.AF_INET, TCP_MD5SIG_EXT,
     lambda: md5sig(socket.AF_INET, B4, b"k", flags=FLAG_IFINDEX, ifindex=1), errno.EINVAL),
    # deleting (keylen 0) a key that is not there
    (socket.AF_INET, TCP_MD5SIG, lambda: md5sig(socket.AF_INET, B4, b""), errno.ENOENT),
])
def test_setsockopt_errors_are_linuxs(family: int, optname: int, build: Any,
                                      code: int) -> None:
    _net, a, _b = Network.two_hosts()
    sock = a.socket(family, socket.SOCK_STREAM)
    with pytest.raises(OSError) as err:
        sock.setsockopt(socket.IPPROTO_TCP, optname, build())
    assert err.value.errno == code


def test_keys_are_added_replaced_and_deleted() -> None:
    _net, a, _b = Network.two_hosts()
    sock = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(socket.AF_INET, B4, b"old"))
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(socket.AF_INET, B4, b"new"))
    assert [k.key for k in sock._sk.md5_keys] == [b"new"]
    # TCP_MD5SIG ignores the prefix fields: a second key for 10.0.0.0/32, not /8
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG,
                    md5sig(socket.AF_INET, "10.0.0.0", b"net", flags=FLAG_PREFIX,
                           prefixlen=8))
    assert [(k.key, k.prefixlen) for k in sock._sk.md5_keys] == [(b"net", 32), (b"new", 32)]
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(socket.AF_INET, B4, b""))
    sock.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(socket.AF_INET, "10.0.0.0", b""))
    assert sock._sk.md5_keys is None
    with pytest.raises(OSError) as err:  # not readable (do_tcp_getsockopt has no case)
        sock.getsockopt(socket.IPPROTO_TCP, TCP_MD5SIG)
    assert err.value.errno == errno.ENOPROTOOPT


def test_unkeyed_connections_are_untouched_by_a_keyed_one() -> None:
    """A key for one peer leaves a connection to another peer unsigned (and its MSS
    and timestamps as usual)."""
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, PORT)
    srv.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(socket.AF_INET, "192.0.2.1", b"k"))
    cli = start_connect(a, socket.AF_INET, B4, PORT)
    child = accept(net, srv)
    assert child._sk.md5_keys is None
    assert not cli._sk.conn.tcb.md5 and cli._sk.conn.tcb.ts_ok


@pytest.mark.parametrize(("options", "counter"), [
    (bytes([1, 1, 19, 17]) + bytes(15), "RcunetTcpMD5BadOption"),  # length 17
    (bytes([19, 18]) + bytes(16) + bytes([19, 18]) + bytes(16) + bytes(4),
     "RcunetTcpMD5BadOption"),  # twice (tcp_do_parse_auth_options: -EEXIST)
    (bytes([1, 1, 19, 18]) + bytes(16), "TcpExtTCPMD5Failure"),  # a wrong digest
    (b"", "TcpExtTCPMD5NotFound"),  # none at all
])
def test_bad_segments_on_a_keyed_connection_are_counted_drops(options: bytes,
                                                              counter: str) -> None:
    """Forged segments for a keyed connection, in window and with data: dropped before
    the socket sees them, counted, nothing raised in the receive path; the connection
    carries on."""
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, PORT)
    srv.setsockopt(socket.IPPROTO_TCP, TCP_MD5SIG, md5sig(socket.AF_INET, A4, b"k"))
    cli = keyed_connect(a, socket.AF_INET, B4, b"k")
    child = accept(net, srv)
    tcb = child._sk.conn.tcb
    src, dst = socket.inet_aton(A4), socket.inet_aton(B4)
    l4 = fr.tcp_segment(src, dst, cli._sk.lport, PORT, tcb.rcv_nxt, tcb.snd_nxt,
                        0x18, 1000, options, b"forged")
    iface = b.interface("eth0")
    b.receive(iface, iface.mac + bytes(6) + b"\x08\x00" + fr.ip_packet(src, dst, 6, l4))
    net.run(0.1)
    got = b.counters.snapshot()
    assert got.get(counter) == 1 and got.get("RcunetRxExceptions", 0) == 0
    with pytest.raises(BlockingIOError):
        child.recv(100)
    send_all(net, cli, b"genuine")
    assert recv_exactly(net, child, 7) == b"genuine"
