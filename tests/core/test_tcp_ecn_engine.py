"""ECN and AccECN through the engine: two connections negotiate, mark and feed back
congestion over a virtual wire that can CE-mark ECT segments, and bad feedback is
counted, never raised."""

from __future__ import annotations

import pytest
from tcp_harness import MS, SECOND, Net, digest, transfer

from rcunet.core.tcp import Connection, Options
from rcunet.core.tcp.accecn import EcnMode
from rcunet.wire import ecn, tcp
from rcunet.wire.tcp_options import ACCECN1, AccEcnOption


class MarkingNet(Net):
    """A wire that CE-marks a fraction of the ECT segments going to the server, as an
    AQM in front of it would, instead of dropping them."""

    def __init__(self, *, mark: float, **kw: object) -> None:
        self.mark = mark
        self.marked = 0
        super().__init__(**kw)  # type: ignore[arg-type]

    def _transmit(self, to: str, s: tcp.Repr) -> None:
        if to == "server" and ecn.is_ect(s.ecn) and s.payload \
                and self.rng.random() < self.mark:
            s = s._replace(ecn=ecn.CE)
            self.marked += 1
        super()._transmit(to, s)


def _established(net: Net) -> tuple[Connection, Connection]:
    net.run(until=net.now + SECOND, stop=lambda: net.server is not None
            and net.server.state.name == "ESTABLISHED")
    assert net.server is not None
    return net.client, net.server


@pytest.mark.parametrize(("client_ecn", "server_ecn", "mode"), [
    (1, 2, EcnMode.RFC3168), (1, 0, EcnMode.DISABLED), (2, 2, EcnMode.DISABLED),
    (3, 3, EcnMode.ACCECN), (3, 5, EcnMode.ACCECN), (3, 2, EcnMode.RFC3168),
    (4, 3, EcnMode.RFC3168), (3, 0, EcnMode.DISABLED),
])
def test_negotiation_by_tcp_ecn(client_ecn: int, server_ecn: int, mode: EcnMode) -> None:
    """tcp_ecn on each side decides the mode both end up in (tcp_ecn_send_syn,
    tcp_ecn_create_request, tcp_ecn_rcv_synack)."""
    net = Net(client_opts=Options(ecn=client_ecn), server_opts=Options(ecn=server_ecn))
    client, server = _established(net)
    assert client.ecn.mode is mode
    assert server.ecn.mode is mode


@pytest.mark.parametrize("tcp_ecn", [1, 3])
def test_data_is_ect_and_bytes_arrive(tcp_ecn: int) -> None:
    """Classic ECN marks new data ECT(0) and pure ACKs Not-ECT; AccECN marks every
    segment ECT(0) and gives each an ACE."""
    net = Net(client_opts=Options(ecn=tcp_ecn), server_opts=Options(ecn=tcp_ecn))
    data = bytes(range(256)) * 400
    assert digest(transfer(net, data)) == digest(data)
    sent = [s for _at, to, s in net.log if to == "server" and not s.flags & tcp.SYN]
    data_segs = [s for s in sent if s.payload]
    assert data_segs and all(s.ecn == ecn.ECT_0 for s in data_segs)
    acks = [s for _at, to, s in net.log if to == "client" and not s.flags & tcp.SYN]
    if tcp_ecn == 1:
        assert all(s.ecn == ecn.NOT_ECT for s in acks)
    else:
        assert all(s.ecn == ecn.ECT_0 for s in acks)
        assert all(tcp.ace(s.flags) for s in acks)


@pytest.mark.parametrize("tcp_ecn", [1, 3])
def test_ce_marks_reduce_cwnd_without_loss(tcp_ecn: int) -> None:
    """The loop works: CE marks instead of drops make the sender back off (cwnd well
    below what an unmarked transfer reaches), every byte arrives once, in order, and
    nothing is retransmitted."""
    data = b"0123456789abcdef" * 40_000
    clean = Net(seed=3, client_opts=Options(ecn=tcp_ecn), server_opts=Options(ecn=tcp_ecn))
    assert transfer(clean, data) == data
    net = MarkingNet(mark=0.05, seed=3, client_opts=Options(ecn=tcp_ecn),
                     server_opts=Options(ecn=tcp_ecn))
    assert transfer(net, data) == data
    client = net.client
    assert net.marked > 0
    assert client.ecn.delivered_ce > 0
    assert client.counters.values.get("TcpRetransSegs", 0) == 0
    assert client.cc.ssthresh < clean.client.cc.ssthresh
    cwr = [s for _at, to, s in net.log if to == "server" and s.flags & tcp.CWR]
    if tcp_ecn == 1:  # RFC 3168: one CWR per reduction, reductions at most once a window
        assert 0 < len(cwr) <= net.marked


def test_ecn_bits_mean_nothing_without_negotiation() -> None:
    """A connection that did not negotiate ECN ignores ECE, CWR and CE (no echo, no
    cwnd reduction) and sends Not-ECT."""
    net = MarkingNet(mark=1.0, client_opts=Options(ecn=0), server_opts=Options(ecn=2))
    data = b"x" * 200_000
    assert transfer(net, data) == data
    assert net.marked == 0  # nothing was ECT, so nothing could be marked
    assert not any(s.flags & (tcp.ECE | tcp.CWR | tcp.AE) for _at, _to, s in net.log
                   if not s.flags & tcp.SYN)


def test_bad_accecn_feedback_is_counted_not_raised() -> None:
    """AccECN options whose counters go backwards or jump in two fields at once, and an
    ACE that may have wrapped, are counted; the connection carries on."""
    net = Net(client_opts=Options(ecn=3), server_opts=Options(ecn=3))
    client, _server = _established(net)
    t = client.tcb
    client.send(b"z" * 30_000, net.now)
    out = client.take_segments()
    assert len(out) > 8
    cwnd_before = client.cc.cwnd
    # every field of the option goes backwards, ACE says 1 CE mark: ambiguous bytes
    bad = tcp.Repr(src_port=client.remote_port, dst_port=client.local_port, seq=t.rcv_nxt,
                   ack=out[0].seq + len(out[0].payload), flags=tcp.with_ace(tcp.ACK, 6),
                   window=65535,
                   unknown_options=((ACCECN1, AccEcnOption(ACCECN1, (0, 0, 0)).data()),))
    client.on_segment(bad, net.now + 10 * MS)
    # one ACK for the whole flight (more than 7 packets): ACE may have wrapped
    whole = bad._replace(ack=out[-1].seq + len(out[-1].payload),
                         flags=tcp.with_ace(tcp.ACK, 7), unknown_options=())
    client.on_segment(whole, net.now + 20 * MS)
    counts = client.counters.values
    assert counts.get("TcpExtAccEcnAmbiguousBytes", 0) >= 1
    assert counts.get("TcpExtAccEcnAceMayHaveWrapped", 0) >= 1
    assert client.state.name == "ESTABLISHED"
    assert client.cc.cwnd < cwnd_before  # the CE marks still count as congestion
