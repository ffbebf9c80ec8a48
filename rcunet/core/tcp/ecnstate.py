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
from rcunet.core.tcp.common import MD5_OPTION_LEN
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.options import Options
from rcunet.wire import ecn as ipecn
from rcunet.wire import tcp
from rcunet.wire.tcp_options import accecn_option

#: The flags ECN uses in a header: ECE, CWR and AE (the ACE field).
ECN_FLAGS = tcp.ACE
#: TCP option space (MAX_TCP_OPTION_SPACE), and what timestamps and SACK take of it
#: (TCPOLEN_TSTAMP_ALIGNED; TCPOLEN_SACK_BASE_ALIGNED and TCPOLEN_SACK_PERBLOCK).
MAX_OPTION_SPACE = 40
TS_SPACE = 12
SACK_BASE = 4
SACK_BLOCK = 8


class EcnState:
    """ECN for one connection; DISABLED until a handshake negotiates a mode."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots("mode", "rfc3168", "accecn_rx", "accecn_tx", "counters",
                                    "syn_ect_rcv", "syn_ect_snt", "ace_fail_recv",
                                    "ace_fail_send", "delivered_ce", "syn_flags",
                                    "handshake_ace", "synack_retrans")

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
        #: SYN-ACKs sent again (req->num_retrans).
        self.synack_retrans = 0
        #: Packets the peer says arrived CE-marked (TCP_INFO's delivered_ce): ACKed
        #: with ECE in RFC 3168 mode, counted by ACE in AccECN mode.
        self.delivered_ce = 0
        #: The ECN flags of our first SYN (a retransmission may drop them).
        self.syn_flags = 0
        #: AccECN: the ACE of our handshake-completing ACK, which reflects the IP ECN
        #: field of the SYN-ACK instead of counting (tcp_accecn_echo_syn_ect), or None.
        self.handshake_ace: int | None = None

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

    def on_repeated_syn(self, seg: tcp.Repr) -> None:
        """The peer's SYN again, in SYN-RECEIVED: an AccECN server's next SYN-ACK
        reflects this SYN's IP ECN field (RFC 9768 §3.1.5: the latest SYN), and a SYN
        with ACE = 0 means ECN-flagged packets may be dropped on the way: no ECT from
        now on (tcp_check_req: TCP_ACCECN_ACE_FAIL_RECV)."""
        if self.mode is not EcnMode.ACCECN:
            return
        self.syn_ect_rcv = seg.ecn
        if not tcp.ace(seg.flags) and not self.ace_fail_recv:
            self.ace_fail_recv = True
            self.counters.add("TcpExtAccEcnAceFail")

    def synack(self, retransmit: bool = False, timeouts: int = 0) -> int:
        """The ECN flags of our SYN-ACK (tcp_ecn_make_synack); ``timeouts``: the
        retransmission timeouts before it (req->num_timeout).  From the second
        retransmission on (req->num_retrans > 1, whether a timeout or the peer's
        repeated SYN sent it) an AccECN server stops sending ECT
        (tcp_accecn_ace_fail_send_set_retrans)."""
        if retransmit:
            self.synack_retrans += 1
            if self.synack_retrans > 1 and self.mode is EcnMode.ACCECN:
                self.ace_fail_send = True
        return accecn.synack_flags(self.mode, self.syn_ect_rcv,
                                   after_timeout=retransmit and timeouts > 0)

    def synack_option(self, options: Options, used: int, combine_saving: int,
                      retransmit: bool) -> tuple[tuple[int, bytes], ...]:
        """The AccECN option of an AccECN SYN-ACK, as many initial counters as fit in
        what the other options (``used`` bytes) leave; none when tcp_ecn_option is 0 or
        on a retransmission (tcp_synack_options: req->num_timeout < 1)."""
        if self.mode is not EcnMode.ACCECN or not options.ecn_option or retransmit:
            return ()
        fit = accecn.fit_option(0, MAX_OPTION_SPACE - used, 0, combine_saving)
        if fit.num_fields < 0:
            return ()
        option = accecn.synack_option(fit.num_fields)
        return ((option.kind, option.data()),)

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
        if self.mode is EcnMode.ACCECN:
            self.handshake_ace = accecn.reflector_ace(self.syn_ect_rcv)
            self._take_option(seg)  # tcp_accecn_option_init: did the SYN-ACK carry it?

    def on_crossed_syn(self, seg: tcp.Repr) -> None:
        """Simultaneous open: the peer's SYN (tcp_ecn_rcv_syn)."""
        self.mode = accecn.after_crossed_syn(self.mode, seg.flags)

    def on_third_ack(self, seg: tcp.Repr, options: Options) -> None:
        """The listener's first ACK of the handshake (tcp_accecn_third_ack)."""
        if self.mode is not EcnMode.ACCECN:
            return
        self._take_option(seg)
        result = accecn.third_ack(seg.flags, not seg.payload, self.syn_ect_snt,
                                  options.ecn_fallback)
        if result.ace_fail:
            self.ace_fail_recv = True
            self.counters.add("TcpExtAccEcnAceFail")
        elif result.ce:
            self.accecn_tx.delivered_ce = (self.accecn_tx.delivered_ce + 1) & accecn.MASK32
            self.delivered_ce += 1

    def option_space(self, options: Options, timestamps: bool) -> int:
        """Bytes a full-sized segment gives up to the AccECN option once it may be sent
        (tcp_current_mss: tcp_established_options' size beyond the header's fixed
        options), so that segments with it still fit the path."""
        if self.mode is not EcnMode.ACCECN or not options.ecn_option \
                or self.accecn_tx.saw_opt is accecn.OptionSeen.NOT_SEEN:
            return 0
        fit = accecn.fit_option(0, MAX_OPTION_SPACE - (TS_SPACE if timestamps else 0)
                                - (MD5_OPTION_LEN if options.md5 else 0))
        return max(fit.size, 0)

    def on_repeated_synack(self, seg: tcp.Repr) -> None:
        """The peer's SYN-ACK again, on an open AccECN connection: the ACK it gets
        reflects this SYN-ACK's ECN field, as the handshake's last ACK did (its ACK was
        lost; the kernel's tcp_accecn_synack_rexmit selftest) -- the latest SYN-ACK's,
        which Linux's tcp_validate_incoming stores in syn_ect_rcv (RFC 9768 §3.1.5)."""
        if self.mode is EcnMode.ACCECN:
            self.syn_ect_rcv = seg.ecn
            self.handshake_ace = accecn.reflector_ace(self.syn_ect_rcv)

    def _take_option(self, seg: tcp.Repr) -> None:
        """A handshake segment's AccECN option: what it shows about the path (the
        counters themselves start at their initial values)."""
        option = accecn_option(seg.unknown_options)
        if option is not None:
            self.accecn_tx.process_option(option, 0)
            self._take_counts()

    def _take_counts(self) -> None:
        """Move what AccEcnSender counted (bad feedback) into the connection's counters
        under their nstat names."""
        counts = self.accecn_tx.counters
        if counts:
            for name, n in counts.items():
                self.counters.add("TcpExt" + name, n)
            counts.clear()

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
            # tcp_ecn_received_counters on every segment, pure ACKs too; its ACK-now
            # (a change of ECN field) and the ACE-wrap guard only speed up the ACK of data
            quick = receiver.on_segment(seg.ecn, len(seg.payload))
            return bool(seg.payload) and (quick or receiver.ack_now())
        return False

    def congestion_signal(self, seg: tcp.Repr, acked: int, mss: int,
                          progress: bool = True) -> bool:
        """Does this acceptable ACK report congestion?  RFC 3168: ECE on a non-SYN
        (tcp_ecn_rcv_ecn_echo; FLAG_ECE); AccECN: the ACE counter moved
        (tcp_accecn_process).  ECN bits on a connection that did not negotiate ECN mean
        nothing.  ``acked``: bytes this ACK newly acknowledges; ``progress``: it
        acknowledged or SACKed something (else AccECN's ACE cannot be trusted).
        Impossible AccECN feedback (a zeroed option, counters that go backwards, an ACE
        that may have wrapped) is counted by ``accecn.AccEcnSender``, never raised."""
        mode = self.mode
        if mode is EcnMode.RFC3168:
            if not accecn.ece_is_echo(mode, seg.flags):
                return False
            # tcp_count_delivered: every packet an ECE ACK delivers was CE-marked
            self.delivered_ce += -(-acked // max(mss, 1))
            return True
        if mode is EcnMode.ACCECN:
            pkts = -(-acked // max(mss, 1))
            sender = self.accecn_tx
            delta = sender.ce_delta(seg.flags, accecn_option(seg.unknown_options),
                                    pkts, acked, mss=mss, progress=progress)
            self._take_counts()
            self.delivered_ce += delta
            return delta > 0
        return False

    # ------------------------------------------------------------ leaving segments
    def outgoing(self, seg: tcp.Repr, new_data: bool, options: Options, now: int,
                 srtt: int | None, timewait: bool = False) -> tcp.Repr:
        """``seg`` (not a SYN) with its ECN flags and IP ECN field (tcp_ecn_send), and
        on an AccECN connection its AccECN option (tcp_established_options).
        ``timewait``: Linux sends it from a timewait sock (tcp_v4_timewait_ack), which
        keeps the socket's TOS (its ECT) but no AccECN state: no ACE, no option."""
        if self.mode is EcnMode.ACCECN:
            if timewait:
                return seg._replace(ecn=self._accecn_ip_ecn())
            return self._accecn_outgoing(seg, options, now, srtt)
        out = accecn.outgoing(self.mode, new_data=new_data, rfc3168=self.rfc3168,
                              receiver=self.accecn_rx, ace_fail_recv=self.ace_fail_recv)
        if not out.flags and not out.ip_ecn:
            return seg
        return seg._replace(flags=seg.flags | out.flags, ecn=out.ip_ecn)

    def _accecn_outgoing(self, seg: tcp.Repr, options: Options, now: int,
                         srtt: int | None) -> tcp.Repr:
        receiver = self.accecn_rx
        ace = self.handshake_ace
        if ace is not None and seg.flags & tcp.ACK and not seg.payload:
            # the handshake's last ACK reflects the SYN-ACK's ECN field (TCPHDR_ACE set
            # by tcp_rcv_synsent_state_process keeps tcp_accecn_set_ace from counting)
            self.handshake_ace = None
            flags = tcp.with_ace(seg.flags, ace)
        else:
            self.handshake_ace = None
            flags = tcp.with_ace(seg.flags, receiver.ace())
        ip = self._accecn_ip_ecn()
        unknown = seg.unknown_options
        blocks = seg.sack_blocks
        now_us = now // 1000
        beacon = accecn.beacon_due(now_us, receiver.opt_sent_at, (srtt or 0) // 1000,
                                   options.ecn_option_beacon)
        if accecn.wants_option(options.ecn_option, self.accecn_tx.saw_opt, False,
                               receiver.opt_demand, beacon):
            used = (TS_SPACE if seg.timestamp is not None else 0) + (
                SACK_BASE + SACK_BLOCK * len(blocks) if blocks else 0) + (
                MD5_OPTION_LEN if options.md5 else 0)  # signed at transmit
            fit = accecn.fit_option(receiver.minlen, MAX_OPTION_SPACE - used, len(blocks))
            if fit.num_fields >= 0:
                option = receiver.option(fit.num_fields, now_us)
                unknown = ((option.kind, option.data()), *unknown)
                blocks = blocks[:fit.num_sack_blocks]
        return seg._replace(flags=flags, ecn=ip, unknown_options=unknown, sack_blocks=blocks)

    def tos_ecn(self) -> int:
        """The ECN bits of the socket's TOS, which a timewait sock keeps (tw_tos): AccECN
        sets ECT on every packet (INET_ECN_xmit), RFC 3168 clears it for pure ACKs."""
        return self._accecn_ip_ecn() if self.mode is EcnMode.ACCECN else ipecn.NOT_ECT

    def _accecn_ip_ecn(self) -> int:
        """An AccECN connection's IP ECN field: ECT(0) on every packet, none once either
        side's ACE feedback failed (tcp_ecn_send)."""
        return ipecn.NOT_ECT if self.ace_fail_recv or self.ace_fail_send else ipecn.ECT_0

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
