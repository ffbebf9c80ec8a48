"""A connection's ECN part: the negotiated feedback mode and, per mode, the state that
turns IP ECN fields into feedback and feedback into a congestion signal -- RFC 3168's
ECE/CWR flags or AccECN's counters (RFC 9768).  The rules are ``accecn.py``'s (pure,
one function per Linux function); this part keeps their state, is its only writer, and
tells the connection what to do: ACK at once, reduce cwnd (the loss part's
``enter_cwr``), which flags and IP ECN field a segment leaves with.

Linux keeps the same in tp->ecn_flags, tp->received_ce, tp->delivered_ce and the
AccECN byte counters (include/net/tcp_ecn.h).
"""

from __future__ import annotations

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp import accecn
from rcunet.core.tcp.accecn import AccEcnReceiver, AccEcnSender, EcnMode, Rfc3168
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.options import Options
from rcunet.wire import ecn as ipecn
from rcunet.wire import tcp

#: The flags ECN uses in a header: ECE, CWR and AE (the ACE field).
ECN_FLAGS = tcp.ACE


class EcnState:
    """ECN for one connection; DISABLED until a handshake negotiates a mode."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots("mode", "rfc3168", "accecn_rx", "accecn_tx", "counters",
                                    "syn_ect_rcv", "syn_ect_snt", "ace_fail_recv",
                                    "ace_fail_send", "delivered_ce", "syn_flags")

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self.mode = EcnMode.DISABLED
        self.rfc3168 = Rfc3168()
        self.accecn_rx = AccEcnReceiver()
        self.accecn_tx = AccEcnSender()
        #: The IP ECN field of the peer's SYN (or SYN-ACK), fed back in AccECN's handshake.
        self.syn_ect_rcv = ipecn.NOT_ECT
        #: The IP ECN field our SYN or SYN-ACK left with.
        self.syn_ect_snt = ipecn.NOT_ECT
        #: The peer's AccECN feedback proved impossible: we stop sending ECT.
        self.ace_fail_recv = False
        self.ace_fail_send = False
        #: Packets the peer says arrived CE-marked (TCP_INFO's delivered_ce): ACKed
        #: with ECE in RFC 3168 mode, counted by ACE in AccECN mode.
        self.delivered_ce = 0
        #: The ECN flags of our first SYN (a retransmission may drop them).
        self.syn_flags = 0

    # ------------------------------------------------------------ the handshake
    def syn(self, options: Options, retransmits: int) -> int:
        """The ECN flags of our SYN (tcp_ecn_send_syn); ``retransmits`` counts this
        retransmission (0 for the first SYN), which may drop them (RFC 3168 §6.1.1.1)."""
        if not retransmits:
            request = accecn.syn_request(options.ecn)
            self.mode, self.syn_flags = request.mode, request.flags
            return request.flags
        flags = accecn.retransmitted_syn_flags(self.syn_flags, self.mode, retransmits,
                                               options.ecn_fallback)
        if self.syn_flags and not flags & ECN_FLAGS:
            self.mode = EcnMode.DISABLED  # tcp_ecn_clear_syn
        return flags

    def answer(self, options: Options, syn: tcp.Repr) -> None:
        """A listener's child takes the peer's SYN (tcp_ecn_create_request)."""
        answer = accecn.answer_syn(options.ecn, syn.flags, syn.ecn)
        self.mode, self.syn_ect_rcv = answer.mode, answer.syn_ect_rcv

    def synack(self) -> int:
        """The ECN flags of our SYN-ACK (tcp_ecn_make_synack)."""
        return accecn.synack_flags(self.mode, self.syn_ect_rcv)

    def on_synack(self, seg: tcp.Repr, options: Options) -> None:
        """The peer's SYN-ACK decides what our SYN asked for (tcp_ecn_rcv_synack)."""
        result = accecn.after_synack(self.mode, seg.flags, seg.ecn, self.syn_ect_snt,
                                     options.ecn_fallback)
        self.mode, self.syn_ect_rcv = result.mode, result.syn_ect_rcv
        if result.ace_fail:
            self.ace_fail_recv = True
            self.counters.add("TcpExtAccEcnAceFail")
        if result.ce:
            self.accecn_rx.on_segment(seg.ecn, 0)

    def on_crossed_syn(self, seg: tcp.Repr) -> None:
        """Simultaneous open: the peer's SYN (tcp_ecn_rcv_syn)."""
        self.mode = accecn.after_crossed_syn(self.mode, seg.flags)

    def on_third_ack(self, seg: tcp.Repr, options: Options) -> None:
        """The listener's first ACK of the handshake (tcp_accecn_third_ack)."""
        if self.mode is not EcnMode.ACCECN:
            return
        result = accecn.third_ack(seg.flags, not seg.payload, self.syn_ect_snt,
                                  options.ecn_fallback)
        if result.ace_fail:
            self.ace_fail_recv = True
            self.counters.add("TcpExtAccEcnAceFail")
        elif result.ce:
            self.accecn_tx.delivered_ce = (self.accecn_tx.delivered_ce + 1) & accecn.MASK32
            self.delivered_ce += 1

    # ------------------------------------------------------------ arriving segments
    def on_segment(self, seg: tcp.Repr) -> bool:
        """An acceptable segment on a synchronized connection: what its IP ECN field
        and CWR say to the data receiver.  True asks for an ACK at once (a first CE
        mark, the peer's CWR on data, a change of ECN field under AccECN)."""
        mode = self.mode
        if mode is EcnMode.RFC3168:
            quick = False
            if seg.payload:
                quick = self.rfc3168.on_data(seg.ecn)  # tcp_data_ecn_check
            if seg.flags & tcp.CWR:
                quick = self.rfc3168.on_cwr(bool(seg.payload)) or quick  # tcp_ecn_accept_cwr
            return quick
        if mode is EcnMode.ACCECN:
            receiver = self.accecn_rx
            quick = receiver.on_segment(seg.ecn, len(seg.payload))
            return quick or receiver.ack_now()
        return False

    def congestion_signal(self, seg: tcp.Repr, acked: int, mss: int) -> bool:
        """Does this acceptable ACK report congestion?  RFC 3168: ECE on a non-SYN
        (tcp_ecn_rcv_ecn_echo; FLAG_ECE); AccECN: the ACE counter moved
        (tcp_accecn_process).  ECN bits on a connection that did not negotiate ECN mean
        nothing.  ``acked``: bytes this ACK newly acknowledges."""
        mode = self.mode
        if mode is EcnMode.RFC3168:
            if not accecn.ece_is_echo(mode, seg.flags):
                return False
            # tcp_count_delivered: every packet an ECE ACK delivers was CE-marked
            self.delivered_ce += -(-acked // max(mss, 1))
            return True
        if mode is EcnMode.ACCECN:
            pkts = -(-acked // max(mss, 1))
            delta = self.accecn_tx.ce_delta(seg.flags, None, pkts, acked, mss=mss,
                                         progress=True)
            self.delivered_ce += delta
            return delta > 0
        return False

    # ------------------------------------------------------------ leaving segments
    def outgoing(self, seg: tcp.Repr, new_data: bool) -> tcp.Repr:
        """``seg`` (not a SYN) with its ECN flags and IP ECN field (tcp_ecn_send)."""
        out = accecn.outgoing(self.mode, new_data=new_data, rfc3168=self.rfc3168,
                              receiver=self.accecn_rx, ace_fail_recv=self.ace_fail_recv)
        if not out.flags and not out.ip_ecn:
            return seg
        return seg._replace(flags=seg.flags | out.flags, ecn=out.ip_ecn)

    def on_reduction(self) -> None:
        """cwnd was reduced (CWR, recovery or loss): RFC 3168's next new data carries
        CWR (tcp_ecn_queue_cwr)."""
        if self.mode is EcnMode.RFC3168:
            self.rfc3168.on_reduction()

    # ------------------------------------------------------------ TCP_INFO
    @property
    def negotiated(self) -> bool:
        """TCPI_OPT_ECN (tcp_ecn_mode_any): ECN feedback of either kind, or AccECN
        asked for and not answered yet."""
        return self.mode is not EcnMode.DISABLED

    @property
    def seen(self) -> bool:
        """TCPI_OPT_ECN_SEEN: the peer's packets have been ECT or CE."""
        return self.rfc3168.seen or self.accecn_rx.prev_ecnfield != ipecn.NOT_ECT \
            or any(self.accecn_rx.received_bytes.values())


__all__ = ["ECN_FLAGS", "EcnState"]
