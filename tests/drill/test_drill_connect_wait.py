"""The drill's blocked send: while the socket is connecting, the blocked call is one of
the connection's ``write_pending`` writers (sk_stream_wait_connect), counted once however
often it is retried, and stops being one when the call completes."""

from __future__ import annotations

import ipaddress

from rcunet.core.tcp import State as CState
from rcunet.drill.syscalls import Fd, Syscalls
from rcunet.host.clock import VirtualClock
from rcunet.host.host import Host


def _connecting_fd() -> Fd:
    host = Host("drill", clock=VirtualClock(), seed=1)
    host.add_interface("tun0", mac=None, mtu=1500, addresses=["192.168.0.1/16"],
                       checksum_offload=False)
    host.add_route("192.0.2.1/32", dev="tun0")
    sk = host.tcp.new_socket(2)
    try:
        sk.connect(ipaddress.ip_address("192.0.2.1").packed, 8080, 0.0)
    except BlockingIOError:
        pass
    assert sk.conn is not None and sk.conn.state is CState.SYN_SENT
    return Fd(sk=sk, family=2)


def test_a_blocked_send_counts_while_the_socket_connects() -> None:
    fd = _connecting_fd()
    conn = fd.sk.conn
    assert conn is not None
    fd._send_left = 100  # type: ignore[attr-defined]
    Syscalls._note_connect_wait(fd, True)
    Syscalls._note_connect_wait(fd, True)  # retried, still blocked: counted once
    assert conn.write_pending == 1
    Syscalls._note_connect_wait(fd, False)  # the call completed
    assert conn.write_pending == 0


def test_a_fast_open_send_whose_syn_took_everything_does_not_count() -> None:
    fd = _connecting_fd()
    conn = fd.sk.conn
    assert conn is not None
    fd._send_left = None  # type: ignore[attr-defined]
    Syscalls._note_connect_wait(fd, True)
    assert conn.write_pending == 0
