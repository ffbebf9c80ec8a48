"""HyStart's finds reach the Host's nstat counters (``TcpExtTCPHystart*``), as Linux's
CUBIC counts them in the netns MIB: a bulk transfer over a rate-limited link with a 20 ms
RTT ends slow start once, by HyStart, before any loss."""

from __future__ import annotations

import socket

from tcp_helpers import connected_pair, transfer

from rcunet.host.network import Network
from rcunet.link.impair import MS, ImpairmentConfig

MB = 1_000_000


def test_hystart_ending_slow_start_is_counted_by_the_sending_host() -> None:
    net = Network(seed=3)
    a, b = net.host("a"), net.host("b")
    # 50 Mbit/s each way, 10 ms one-way, a queue deep enough that nothing drops
    path = ImpairmentConfig(rate_bps=50_000_000, delay=10 * MS, rate_queue=4 * MB, seed=3)
    net.link(a, b, ["10.0.0.1/24"], ["10.0.0.2/24"], impair=path, impair_ba=path)
    srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    data = bytes(2 * MB)
    assert transfer(net, cli, child, data, timeout=600) == data
    for s in (cli, child, srv):
        s.close()
    counts = a.counters
    assert counts.get("TcpRetransSegs") == 0
    detections = (counts.get("TcpExtTCPHystartTrainDetect")
                  + counts.get("TcpExtTCPHystartDelayDetect"))
    assert detections == 1
    cwnd = counts.get("TcpExtTCPHystartTrainCwnd") + counts.get("TcpExtTCPHystartDelayCwnd")
    assert cwnd >= 16  # hystart_low_window: never below it
    assert b.counters.get("TcpExtTCPHystartTrainDetect") == 0  # the receiver sent no data
