"""getsockopt(TCP_INFO): Linux's struct tcp_info layout with the values rcunet tracks."""

from __future__ import annotations

import socket
import struct

from tcp_helpers import connected_pair

from rcunet.host.network import Network
from rcunet.host.tcp.info import LAYOUT, SIZE

TCP_INFO = getattr(socket, "TCP_INFO", 11)


def _field(raw: bytes, name: str) -> int:
    offset = 0
    for field_name, code in LAYOUT:
        size = struct.calcsize("=" + code)
        if field_name == name:
            return int(struct.unpack_from("=" + code, raw, offset)[0])
        offset += size
    raise KeyError(name)


def test_tcp_info_reports_state_mss_and_rtt_in_linux_layout() -> None:
    net, a, b = Network.two_hosts()
    _srv, cli, _child = connected_pair(net, a, b)
    raw = cli.getsockopt(socket.IPPROTO_TCP, TCP_INFO, SIZE)
    assert isinstance(raw, bytes) and len(raw) == SIZE
    assert _field(raw, "state") == 1  # TCP_ESTABLISHED
    assert _field(raw, "snd_mss") == cli.getsockopt(socket.IPPROTO_TCP, socket.TCP_MAXSEG)
    assert _field(raw, "snd_cwnd") == 10
    assert _field(raw, "rto") >= 200_000  # microseconds, at least rto_min
    assert _field(raw, "options") & 1  # TCPI_OPT_TIMESTAMPS
    # a short buffer gets the head of the struct, as Linux copies min(len, sizeof)
    assert cli.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 8) == raw[:8]
    net.close()
