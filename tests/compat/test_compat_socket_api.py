"""The parts of socket.socket's interface programs trip over first, as CPython behaves."""

from __future__ import annotations

import errno
import os
import socket
import ssl
import struct
from typing import Any

import pytest

import rcunet
from rcunet.api.socket import Socket


def _pair(a: Any, b: Any, family: int = socket.AF_INET) -> tuple[Any, Any, Any]:
    listener = b.socket(family, socket.SOCK_STREAM)
    listener.bind(("", 0))
    listener.listen(4)
    client = a.socket(family, socket.SOCK_STREAM)
    client.settimeout(10)
    address = "10.0.0.2" if family == socket.AF_INET else "::ffff:10.0.0.2"
    client.connect((address, listener.getsockname()[1]))
    server, _ = listener.accept()
    return listener, client, server


def test_every_socket_method_exists(net: Any) -> None:
    _net, a, _b = net
    sock = a.socket()
    missing = [name for name in dir(socket.socket) if not name.startswith("_")
               and not hasattr(sock, name)]
    assert missing == []
    with pytest.raises(OSError) as info:
        sock.sendmsg_afalg([b"x"])
    assert info.value.errno == errno.EOPNOTSUPP
    sock.close()


def test_closed_socket_is_python_s(net: Any) -> None:
    _net, a, _b = net
    sock = a.socket()
    fd = sock.fileno()
    assert fd >= 0 and os.get_inheritable(fd) is False
    sock.close()
    assert sock.fileno() == -1
    with pytest.raises(OSError) as info:
        sock.getsockname()
    assert info.value.errno == errno.EBADF
    sock.close()  # twice is fine


@pytest.mark.real_time_only("outside drop-in mode, which a simulated program never is: "
                             "there os.close() of the number closes the descriptor")
def test_fileno_cannot_be_taken_from_under_the_socket(net: Any) -> None:
    """os.close() of the number, or ssl taking it over, leave the socket working."""
    _net, a, b = net
    listener, client, server = _pair(a, b)
    os.close(client.fileno())
    client.sendall(b"still here")
    assert server.recv(100) == b"still here"
    raw = socket.socket(fileno=os.dup(server.fileno()))  # a foreign socket on a dup
    raw.settimeout(None)  # clears O_NONBLOCK on the shared description
    raw.close()
    server.sendall(b"and here")
    assert client.recv(100) == b"and here"
    with pytest.raises(OSError) as info:
        client.close()  # its fd was closed under it: EBADF, as CPython says
    assert info.value.errno == errno.EBADF
    for sock in (listener, server):
        sock.close()


def test_makefile_deferred_close(net: Any) -> None:
    _net, a, b = net
    listener, client, server = _pair(a, b)
    reader = client.makefile("rb")
    client.close()  # the file keeps the socket open (http.client does this)
    server.sendall(b"line one\nline two\n")
    server.close()
    assert reader.readline() == b"line one\n"
    assert reader.read() == b"line two\n"
    assert client.fileno() >= 0
    reader.close()
    assert client.fileno() == -1
    listener.close()


def test_dup_detach_fromfd(net: Any) -> None:
    _net, a, b = net
    listener, client, server = _pair(a, b)
    twin = client.dup()
    client.close()
    twin.sendall(b"from the dup")
    assert server.recv(100) == b"from the dup"
    with rcunet.patched(a):
        fd = twin.detach()
        assert twin.fileno() == -1
        adopted = socket.socket(fileno=fd)
        assert isinstance(adopted, Socket) and isinstance(adopted, socket.socket)
        adopted.sendall(b"adopted")
        assert server.recv(100) == b"adopted"
        shared = socket.fromfd(adopted.fileno(), socket.AF_INET, socket.SOCK_STREAM)
        adopted.close()
        shared.sendall(b"shared")
        assert server.recv(100) == b"shared"
        shared.close()
    for sock in (listener, server):
        sock.close()


def test_timeouts_and_errors_as_python(net: Any) -> None:
    _net, a, b = net
    listener, client, server = _pair(a, b)
    assert client.timeout == 10.0
    client.settimeout(None)
    client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("@ll", 0, 200000))
    with pytest.raises(BlockingIOError):
        client.recv(10)  # SO_RCVTIMEO: EAGAIN, as Linux
    sec, usec = struct.unpack("@ll", client.getsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO,
                                                       16))
    assert (sec, usec) == (0, 200000)
    with pytest.raises(TypeError):
        client.settimeout("1")
    socket.setdefaulttimeout(3.5)
    try:
        assert a.socket().gettimeout() == 3.5
    finally:
        socket.setdefaulttimeout(None)
    assert client.sendto(b"addr ignored", ("10.9.9.9", 1)) == 12  # Linux ignores it
    assert server.recvfrom(100) == (b"addr ignored", None)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    server.close()  # RST
    client.settimeout(5)
    with pytest.raises(ConnectionResetError) as info:
        while client.recv(100):
            pass
    assert str(info.value) == "[Errno 104] Connection reset by peer"
    client.close()
    listener.close()


def test_v4_mapped_peer_prints_as_linux(net: Any) -> None:
    _net, a, b = net
    listener, client, server = _pair(a, b, socket.AF_INET6)
    assert client.getpeername()[0] == "::ffff:10.0.0.2"
    for sock in (listener, client, server):
        sock.close()


def test_sendmsg_recvmsg(net: Any) -> None:
    _net, a, b = net
    listener, client, server = _pair(a, b)
    assert client.sendmsg([b"gath", memoryview(b"ered")]) == 8
    assert server.recvmsg(100) == (b"gathered", [], 0, None)
    with pytest.raises(OSError) as info:  # sock_cmsg_send takes no SO_TIMESTAMP
        client.sendmsg([b"x"], [(socket.SOL_SOCKET, 29, b"\0" * 16)])
    assert info.value.errno == errno.EINVAL
    # SCM_RIGHTS means nothing to an inet socket: Linux ignores it
    assert client.sendmsg([b"x"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, b"\0" * 4)]) == 1
    assert server.recv(1) == b"x"
    udp_a, udp_b = a.socket(socket.AF_INET, socket.SOCK_DGRAM), b.socket(
        socket.AF_INET, socket.SOCK_DGRAM)
    udp_b.bind(("", 9999))
    udp_b.settimeout(5)
    udp_a.sendmsg([b"0123456789"], [], 0, ("10.0.0.2", 9999))
    data, ancdata, flags, source = udp_b.recvmsg(4)
    assert (data, ancdata, flags & socket.MSG_TRUNC, source[0]) == (
        b"0123", [], socket.MSG_TRUNC, "10.0.0.1")
    for sock in (listener, client, server, udp_a, udp_b):
        sock.close()


def test_sendfile_by_send(net: Any, tmp_path: Any) -> None:
    _net, a, b = net
    listener, client, server = _pair(a, b)
    path = tmp_path / "blob"
    path.write_bytes(os.urandom(50000))
    with open(path, "rb") as file:
        assert client.sendfile(file, 1000, 20000) == 20000
    client.close()
    got = bytearray()
    server.settimeout(5)
    while chunk := server.recv(65536):
        got += chunk
    assert bytes(got) == path.read_bytes()[1000:21000]
    server.close()
    listener.close()


def test_wrap_socket_outside_drop_in(net: Any) -> None:
    """ctx.wrap_socket of an rcunet socket gives rcunet's TLS socket, patched or not,
    and the network closes cleanly afterwards (the readiness fd was never taken)."""
    _net, a, _b = net
    sock = a.socket()
    fd = sock.fileno()
    tls = ssl.create_default_context().wrap_socket(sock, server_hostname="b")
    assert tls.fileno() == fd
    tls.close()
    assert sock.fileno() == -1


def test_udp_readiness_survives_a_blocking_dup(net: Any) -> None:
    """A program that makes its dup of a UDP socket's eventfd blocking (one open file
    description with ours) leaves readiness following the queue: rcunet reads the eventfd
    only while its counter is up."""
    import select

    _net, a, b = net
    receiver, sender = b.socket(socket.AF_INET, socket.SOCK_DGRAM), a.socket(
        socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("", 7777))
    receiver.settimeout(5)
    os.set_blocking(receiver.fileno(), True)  # the open file description is shared
    for round_ in range(3):
        sender.sendto(b"x%d" % round_, ("10.0.0.2", 7777))
        assert select.select([receiver], [], [], 5)[0] == [receiver]
        assert receiver.recv(10) == b"x%d" % round_
        assert select.select([receiver], [], [], 0)[0] == []
    receiver.close()
    sender.close()
