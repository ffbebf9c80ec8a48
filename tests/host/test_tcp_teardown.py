"""The one teardown of a TCP connection (``TcpLayer.teardown``): a close and a TIME_WAIT
end alike, so a Fast Open child gives its place in the listener's Fast Open queue back
whichever way it ends."""

from __future__ import annotations

import socket
from typing import Any

from tcp_helpers import B4, accept, listener

from rcunet.core.tcp import fastopen
from rcunet.core.tcp.timewait import TimeWait
from rcunet.host.network import Network
from rcunet.host.tcp.life import FINISHED, UNHASHED, advance
from rcunet.tuning import Tuning
from rcunet.wire import tcp

#: Fast Open on both sides, and no cookie needed: a SYN opens fast with its data.
_TFO = Tuning(tcp_fastopen=fastopen.TFO_CLIENT_ENABLE | fastopen.TFO_SERVER_ENABLE
              | fastopen.TFO_SERVER_COOKIE_NOT_REQD)


def _fastopen_child(net: Network, a: Any, b: Any) -> tuple[Any, Any]:
    """A listener and its Fast Open child, accepted in SYN_RECV: the client (raw
    segments from ``a``) never completes the handshake, so the child still counts in
    the listener's Fast Open queue."""
    srv = listener(b, socket.AF_INET, B4, 8080)
    srv.setsockopt(socket.IPPROTO_TCP, 23, 4)  # TCP_FASTOPEN: a queue of 4
    a.ip.handlers[tcp.PROTOCOL] = lambda info, payload: None  # the SYN,ACK goes unanswered
    syn = tcp.Repr(src_port=40000, dst_port=8080, seq=1000, ack=0, flags=tcp.SYN,
                   window=65535, mss=1460, payload=b"hello")
    a.tcp.transmit.segment(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), syn)
    child = accept(net, srv)
    assert child.recv(16) == b"hello"
    assert srv._sk.fastopen_qlen == 1
    return srv, child


def test_time_wait_teardown_releases_the_fast_open_slot() -> None:
    """The TIME_WAIT end of a Fast Open child that still counts in its listener's Fast
    Open queue (reqsk_fastopen_remove runs from tcp_done and tcp_time_wait alike).  The
    TIME_WAIT teardown once had its own copy of the tail, without this release: the
    slot leaked, and the listener opened one fewer connection fast for ever."""
    net, a, b = Network.two_hosts(tuning=_TFO)
    srv, child = _fastopen_child(net, a, b)
    sk = child._sk
    assert sk.conn is not None
    advance(sk, FINISHED)  # what ``post`` takes when it claims a teardown
    b.tcp.teardown.run(sk, TimeWait.of(sk.conn))
    assert sk.life & UNHASHED
    assert srv._sk.fastopen_qlen == 0
    child.close()
    srv.close()
    b.tcp.close_all()


def test_reset_child_releases_the_fast_open_slot() -> None:
    """The close end of the same child (an abort: RST, then tcp_done)."""
    net, a, b = Network.two_hosts(tuning=_TFO)
    srv, child = _fastopen_child(net, a, b)
    child.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    child.close()
    assert net.run_until(lambda: srv._sk.fastopen_qlen == 0, 5)
    srv.close()
