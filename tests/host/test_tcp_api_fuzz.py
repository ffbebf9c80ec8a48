"""Random sequences of socket calls on both ends of a connection (deterministic Hosts):
every call either works or raises OSError with an errno, each side only ever receives a
prefix of what the other sent, and once both close everything is released."""

from __future__ import annotations

import errno
import socket
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tcp_helpers import assert_no_leaks, connected_pair

from rcunet.host.network import Network

OPS = st.lists(
    st.tuples(
        st.sampled_from(["send", "recv", "shut_wr", "shut_rd", "close", "run", "nodelay",
                         "linger0", "error"]),
        st.booleans(),  # which side
        st.integers(0, 300_000),
    ),
    max_size=25,
)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS)
def test_random_socket_calls_keep_the_stream_sane(ops: list[tuple[str, bool, int]]) -> None:
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    ends = {True: cli, False: child}
    sent = {True: bytearray(), False: bytearray()}
    got = {True: bytearray(), False: bytearray()}
    closed = {True: False, False: False}
    for op, side, n in ops:
        sock: Any = ends[side]
        if closed[side]:
            continue
        try:
            if op == "send":
                data = bytes([len(sent[side]) % 251]) * (n % 70_000 + 1)
                k = sock.send(data)
                sent[side] += data[:k]
            elif op == "recv":
                got[side] += sock.recv(n % 100_000 + 1)
            elif op == "shut_wr":
                sock.shutdown(socket.SHUT_WR)
            elif op == "shut_rd":
                sock.shutdown(socket.SHUT_RD)
            elif op == "close":
                sock.close()
                closed[side] = True
            elif op == "run":
                net.run(n / 100_000)
            elif op == "nodelay":
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, n & 1)
            elif op == "linger0":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            else:
                assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) in (
                    0, errno.ECONNRESET, errno.EPIPE, errno.ETIMEDOUT)
        except OSError as exc:
            assert exc.errno is not None
        # each side has received a prefix of what the other side sent
        assert bytes(got[side]) == bytes(sent[not side][: len(got[side])])
        other = not side
        assert bytes(got[other]) == bytes(sent[side][: len(got[other])])
    for side in (True, False):
        if not closed[side]:
            ends[side].close()
    srv.close()
    net.run(130)  # FIN handshakes, retransmission give-ups, 2MSL
    assert_no_leaks(a, b)
