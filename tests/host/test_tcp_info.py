"""getsockopt(TCP_INFO): Linux's struct tcp_info layout with the values rcunet tracks."""

from __future__ import annotations

import errno
import socket
import struct

import pytest
from tcp_helpers import B4, connected_pair, listener, start_connect, transfer

from rcunet.host.network import Network
from rcunet.host.tcp.info import LAYOUT, SIZE
from rcunet.link.impair import ImpairmentConfig

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


#: Offsets in Linux's struct tcp_info (include/uapi/linux/tcp.h): what a reader compiled
#: against the kernel's header finds where.  The struct ends with the AccECN counters
#: and their mode word (Linux 6.18: 280 bytes).
LINUX_OFFSETS = {
    "state": 0, "flags": 7, "rto": 8, "unacked": 24, "sacked": 28, "lost": 32,
    "retrans": 36, "fackets": 40, "last_data_sent": 44, "pmtu": 60, "rtt": 68,
    "snd_ssthresh": 76, "snd_cwnd": 80, "reordering": 88, "total_retrans": 100,
    "pacing_rate": 104, "bytes_acked": 120, "segs_out": 136, "min_rtt": 148,
    "delivery_rate": 160, "sndbuf_limited": 184, "delivered": 192, "bytes_sent": 200,
    "bytes_retrans": 208, "dsack_dups": 216, "reord_seen": 220, "rcv_ooopack": 224,
    "snd_wnd": 228, "rcv_wnd": 232, "rehash": 236, "total_rto": 240,
    "total_rto_recoveries": 242, "total_rto_time": 244, "received_ce": 248,
    "received_ce_bytes": 272, "ecn_bits": 276,
}


def test_layout_matches_linux_offsets() -> None:
    offset, offsets = 0, {}
    for name, code in LAYOUT:
        offsets[name] = offset
        offset += struct.calcsize("=" + code)
    assert {name: offsets[name] for name in LINUX_OFFSETS} == LINUX_OFFSETS
    assert SIZE == offset == 280


def test_a_negative_length_is_einval_and_zero_gets_nothing() -> None:
    net, a, b = Network.two_hosts()
    _srv, cli, _child = connected_pair(net, a, b)
    with pytest.raises(OSError) as info:
        cli._sk.getsockopt(socket.IPPROTO_TCP, TCP_INFO, -1)
    assert info.value.errno == errno.EINVAL
    assert cli.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 0) == b""
    net.close()


def test_totals_agree_after_a_transfer_over_a_lossy_link() -> None:
    """What one side counts sending, the other counts receiving: bytes acknowledged
    and received, and every segment the receiver took (segs_in) is one the sender put
    out (segs_out) or a duplicate of it; the retransmissions that repaired the loss
    are in total_retrans and bytes_retrans, and the delivered segments cover the data."""
    net = Network(seed=7)
    a, b = net.host("a"), net.host("b")
    net.link(a, b, ["10.0.0.1/24"], ["10.0.0.2/24"],
             impair=ImpairmentConfig(loss=0.03, seed=7))
    _srv, cli, child = connected_pair(net, a, b)
    data = bytes(300_000)
    assert transfer(net, cli, child, data, timeout=600) == data
    assert net.run_until(lambda: _field(_info(cli), "unacked") == 0, 60)
    sent, got = _info(cli), _info(child)
    # (the active end's bytes_acked counts its SYN, as tcp_snd_una_update does)
    assert _field(sent, "bytes_acked") - 1 == _field(got, "bytes_received") == len(data)
    assert _field(sent, "bytes_sent") == len(data) + _field(sent, "bytes_retrans")
    assert _field(sent, "total_retrans") > 0 and _field(sent, "bytes_retrans") > 0
    assert _field(sent, "data_segs_out") >= _field(got, "data_segs_in") > 0
    mss = _field(sent, "snd_mss")
    assert _field(sent, "delivered") >= len(data) // mss
    assert (_field(sent, "sacked"), _field(sent, "lost"), _field(sent, "retrans")) == (0, 0, 0)
    assert 0 < _field(sent, "min_rtt") <= _field(sent, "rtt")
    net.close()


def _info(sock: object) -> bytes:
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, SIZE)  # type: ignore[attr-defined]
    assert isinstance(raw, bytes)
    return raw


def test_a_listener_reports_its_accept_queue() -> None:
    """tcp_get_info on a listener: tcpi_unacked is the accept queue's length and
    tcpi_sacked its limit (the listen() backlog)."""
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8081, backlog=5)
    cli = start_connect(a, socket.AF_INET, B4, 8081)
    assert net.run_until(lambda: _field(_info(srv), "unacked") == 1, 5)
    raw = _info(srv)
    assert (_field(raw, "state"), _field(raw, "sacked")) == (10, 5)  # TCP_LISTEN
    assert (_field(raw, "snd_cwnd"), _field(raw, "reordering")) == (10, 3)
    cli.close()
    net.close()
