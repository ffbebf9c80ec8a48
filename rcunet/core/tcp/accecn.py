"""ECN (RFC 3168) and Accurate ECN (RFC 9768) as Linux 7.0 has them: the negotiation on
SYN and SYN-ACK for each ``net.ipv4.tcp_ecn`` value, the ACE counter and the AccECN
option's byte counters on both sides, and the rules for sending the option.

Pure and typed: the connection gives each function what it needs (flags, the IP ECN
field, counts) and keeps the state objects.  Linux's sources, by function:
include/net/tcp_ecn.h (tcp_ecn_send_syn, tcp_ecn_rcv_synack, tcp_ecn_rcv_syn,
tcp_accecn_third_ack, tcp_ecn_received_counters, tcp_accecn_set_ace,
tcp_accecn_option_init, tcp_update_ecn_bytes), net/ipv4/tcp_input.c
(tcp_ecn_create_request, tcp_accecn_process_option, __tcp_accecn_process) and
net/ipv4/tcp_output.c (__tcp_retransmit_skb's SYN fallback, tcp_established_options,
tcp_options_fit_accecn, tcp_options_write).

Bad input is never raised: a zeroed option, byte counters that go backwards or change in
two fields at once, an ACE that may have wrapped are counted in ``counters`` (rcunet's
names; Linux keeps no count of them) and handled as Linux does.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field
from typing import NamedTuple

from rcunet.wire import ecn
from rcunet.wire import tcp as wtcp
from rcunet.wire.tcp_options import ACCECN0, ACCECN1, ACCECN_FIELD_LEN, AccEcnOption

MASK24 = 0xFFFFFF
MASK32 = 0xFFFFFFFF

#: RFC 9768 §3.2.1 initial values (Linux TCP_ACCECN_*_INIT_OFFSET): r.cep starts at 5,
#: the ECT byte counters at 1 so that a zeroed option shows.
CEP_INIT = 5
E1B_INIT = 1
E0B_INIT = 1
CEB_INIT = 0
#: ACE is 3 bits (TCP_ACCECN_CEP_ACE_MASK).
ACE_MASK = 0x7
#: ACK at once when this many CE marks wait to be fed back (TCP_ACCECN_ACE_MAX_DELTA).
ACE_MAX_DELTA = 6
#: RFC 9768 Appendix A.2.2's SAFETY_FACTOR as a shift (TCP_ACCECN_SAFETY_SHIFT).
SAFETY_SHIFT = 1
#: The option: 2 bytes of kind and length, 3 per field, 3 fields at most.
OPTION_BASE = 2
OPTION_MAX_FIELDS = 3
OPTION_MAX_SIZE = OPTION_BASE + ACCECN_FIELD_LEN * OPTION_MAX_FIELDS
SACK_BLOCK_LEN = 8
#: pkts_acked_ewma (__tcp_accecn_process): weight and precision shifts, and the
#: threshold of ACK compression above which ACE alone is trusted.
EWMA_WEIGHT = 6
EWMA_PREC = 6
ACK_COMP_THRESH = 4
#: Sending more than 2^23 - 1 bytes without seeing the option: too late to trust it.
OPTION_LATE_BYTES = (1 << 23) - 1


class TcpEcn(enum.IntEnum):
    """``net.ipv4.tcp_ecn``: what a connection asks for outgoing, accepts incoming."""

    OFF = 0                  #: neither
    ECN = 1                  #: RFC 3168 both ways
    IN_ECN_OUT_NOECN = 2     #: answer RFC 3168, never ask (Linux's default)
    ACCECN = 3               #: AccECN both ways
    IN_ACCECN_OUT_ECN = 4    #: answer AccECN, ask RFC 3168
    IN_ACCECN_OUT_NOECN = 5  #: answer AccECN, never ask


class EcnOption(enum.IntEnum):
    """``net.ipv4.tcp_ecn_option`` (enum tcp_accecn_option)."""

    DISABLED = 0
    MINIMUM = 1   #: only when demanded (CE seen, counter changes) or as a beacon
    FULL = 2      #: on every segment that has room (Linux's default)
    PERSIST = 3   #: FULL, and go on even after the option was lost on the path


class EcnMode(enum.Enum):
    """A connection's ECN feedback mode (Linux tcp_ecn_mode_*)."""

    DISABLED = enum.auto()
    RFC3168 = enum.auto()
    #: AccECN asked for in our SYN, the SYN-ACK not seen yet.
    PENDING = enum.auto()
    ACCECN = enum.auto()


@dataclass(frozen=True, slots=True)
class EcnSysctls:
    """The ECN sysctls with Linux's defaults (tcp_sk_init)."""

    tcp_ecn: TcpEcn = TcpEcn.IN_ECN_OUT_NOECN
    tcp_ecn_option: EcnOption = EcnOption.FULL
    #: Send the option at least this many times per RTT (0: no beacon).
    tcp_ecn_option_beacon: int = 3
    tcp_ecn_fallback: bool = True


# ---------------------------------------------------------------------- negotiation
class SynRequest(NamedTuple):
    """The ECN flags of our SYN and the mode that leaves us in (tcp_ecn_send_syn)."""

    flags: int
    mode: EcnMode


#: The answers without ECN, made once: a NamedTuple made by mypyc-compiled code is a
#: call of its interpreted ``__new__``, and most connections take these.
_NO_ECN_REQUEST = SynRequest(0, EcnMode.DISABLED)


def syn_request(tcp_ecn: int, *, ca_needs_ecn: bool = False,
                ca_needs_accecn: bool = False) -> SynRequest:
    """What a connecting socket asks for: AE+CWR+ECE for AccECN (tcp_ecn 3, or a
    congestion control that needs it), CWR+ECE for RFC 3168 (tcp_ecn 1 and 4)."""
    use_accecn = tcp_ecn == TcpEcn.ACCECN or ca_needs_accecn
    use_ecn = (tcp_ecn in (TcpEcn.ECN, TcpEcn.IN_ACCECN_OUT_ECN) or ca_needs_ecn
               or use_accecn)
    if not use_ecn:
        return _NO_ECN_REQUEST
    if use_accecn:
        return SynRequest(wtcp.AE | wtcp.CWR | wtcp.ECE, EcnMode.PENDING)
    return SynRequest(wtcp.CWR | wtcp.ECE, EcnMode.RFC3168)


def retransmitted_syn_flags(flags: int, mode: EcnMode, retransmits: int,
                            fallback: bool = True) -> int:
    """The flags of a retransmitted SYN: RFC 3168 §6.1.1.1 drops ECN from it, AccECN
    only from the second retransmission on (RFC 9768 §3.1.4.1; __tcp_retransmit_skb
    with tcp_ecn_clear_syn).  ``retransmits`` counts this one (1 for the first)."""
    syn_ecn = wtcp.CWR | wtcp.ECE
    if (mode is not EcnMode.PENDING or retransmits > 1) and flags & syn_ecn == syn_ecn \
            and fallback:
        return flags & ~wtcp.ACE
    return flags


def accecn_syn_requested(flags: int) -> bool:
    """RFC 9768 §3.1.2: a SYN whose AE, CWR, ECE are anything but 000 or 011 asks for
    AccECN (tcp_accecn_syn_requested)."""
    value = wtcp.ace(flags)
    return value != 0 and value != 0b011


class Answer(NamedTuple):
    """What a listener answers a SYN with (tcp_ecn_create_request)."""

    mode: EcnMode
    #: The IP ECN field the SYN arrived with (AccECN echoes it on the SYN-ACK).
    syn_ect_rcv: int = ecn.NOT_ECT


_ECN_DECLINED = Answer(EcnMode.DISABLED)  # see _NO_ECN_REQUEST


def answer_syn(tcp_ecn: int, flags: int, ip_ecn: int, *, reserved: int = 0,
               ca_needs_ecn: bool = False, ca_needs_accecn: bool = False) -> Answer:
    """The listener's side: AccECN when asked and tcp_ecn is 3-5; RFC 3168 when the SYN
    has ECE and CWR, tcp_ecn is not 0 and the SYN is not ECT itself (RFC 3168 §6.1.1:
    an ECT SYN means something rewrites the TOS) unless a reserved bit or AE is set
    (RFC 8311 §4.3).  ``reserved`` is the header's three reserved bits."""
    if accecn_syn_requested(flags) and (tcp_ecn >= TcpEcn.ACCECN or ca_needs_accecn):
        return Answer(EcnMode.ACCECN, ip_ecn & ecn.MASK)
    if flags & (wtcp.ECE | wtcp.CWR) != wtcp.ECE | wtcp.CWR:
        return _ECN_DECLINED
    ect = ip_ecn & ecn.MASK != ecn.NOT_ECT
    ecn_ok = tcp_ecn != TcpEcn.OFF
    if ((not ect or reserved or flags & wtcp.AE) and ecn_ok) or ca_needs_ecn:
        return Answer(EcnMode.RFC3168)
    return _ECN_DECLINED


#: tcp_accecn_reflector_flags: the ACE of a SYN-ACK per IP ECN field of the SYN
#: (RFC 9768 Table 2): Not-ECT 010, ECT(1) 011, ECT(0) 100, CE 110.
_REFLECT = {ecn.NOT_ECT: 0b010, ecn.ECT_1: 0b011, ecn.ECT_0: 0b100, ecn.CE: 0b110}


def reflector_ace(ip_ecn: int) -> int:
    """The ACE value that feeds back the IP ECN field a SYN (or SYN-ACK) arrived with."""
    return _REFLECT[ip_ecn & ecn.MASK]


def synack_flags(mode: EcnMode, syn_ect_rcv: int, after_timeout: bool = False) -> int:
    """The ECN flags of our SYN-ACK (tcp_ecn_make_synack): the reflected ACE for AccECN,
    ECE for RFC 3168, nothing otherwise.  ``after_timeout``: a retransmission sent once
    an earlier SYN-ACK timed out (TCP_SYNACK_RETRANS with req->num_timeout), which
    carries no ECN flags at all -- ACE = 0 keeps an AccECN server in AccECN mode while
    the path may be dropping ECN-flagged SYN-ACKs (RFC 9768 §3.2.3.2.2)."""
    if after_timeout:
        return 0
    if mode is EcnMode.ACCECN:
        return wtcp.with_ace(0, reflector_ace(syn_ect_rcv))
    if mode is EcnMode.RFC3168:
        return wtcp.ECE
    return 0


#: tcp_accecn_extract_syn_ect: the IP ECN field our SYN arrived with, from the ACE of
#: the SYN-ACK (RFC 9768 Table 2; undefined values read as ECT(0)/ECT(1) as Linux does).
_ACE_TO_ECT = (ecn.ECT_0, ecn.ECT_1, ecn.NOT_ECT, ecn.ECT_1, ecn.ECT_0, ecn.ECT_1, ecn.CE,
               ecn.ECT_1)


def syn_ect_from_ace(value: int) -> int:
    return _ACE_TO_ECT[value & ACE_MASK]


def ect_transition_valid(sent: int, received: int) -> bool:
    """Could the path have turned ``sent`` into ``received``?  Only ECT into CE or the
    other ECT (tcp_ect_transition_valid): not from or to Not-ECT, never out of CE."""
    if received == sent:
        return True
    if sent == ecn.NOT_ECT or received == ecn.NOT_ECT:
        return False
    return sent != ecn.CE


class SynAckResult(NamedTuple):
    """What the client learns from the SYN-ACK (tcp_ecn_rcv_synack)."""

    mode: EcnMode
    #: The SYN-ACK was CE-marked and the feedback is consistent: one CE received.
    ce: bool = False
    #: The ACE feedback of our SYN is impossible (ACE failure on receive).
    ace_fail: bool = False
    #: The IP ECN field the SYN-ACK arrived with (AccECN only).
    syn_ect_rcv: int = ecn.NOT_ECT


_NO_ECN_SYNACK = SynAckResult(EcnMode.DISABLED)  # see _NO_ECN_REQUEST


def after_synack(mode: EcnMode, flags: int, ip_ecn: int, syn_ect_snt: int = ecn.NOT_ECT,
                 fallback: bool = True) -> SynAckResult:
    """The mode a SYN-ACK leaves a connecting socket in.  RFC 3168 requested: the answer
    must be ECE without CWR; AccECN requested: RFC 9768 Table 2 by the ACE value (000 and
    111: no ECN; 001: classic ECN; else AccECN -- 101 included, which tcp_ecn_rcv_synack
    leaves to its default case: the AE bit is unused by classic ECN, as the kernel's
    tcp_accecn_serverside_accecn_disabled1 selftest shows)."""
    if mode is EcnMode.DISABLED:
        return _NO_ECN_SYNACK
    value = wtcp.ace(flags)
    if value in (0b000, 0b111):
        return _NO_ECN_SYNACK
    if value == 0b001:
        return SynAckResult(EcnMode.RFC3168 if mode is EcnMode.PENDING else mode)
    # tcp_ecn_rcv_synack's default case: AccECN, whatever we asked for (a socket that
    # asked for RFC 3168 and gets 010, 011, 100 or 110 back goes AccECN too).
    ip = ip_ecn & ecn.MASK
    if ip != ecn.CE:
        return SynAckResult(EcnMode.ACCECN, syn_ect_rcv=ip)
    valid = not fallback or ect_transition_valid(syn_ect_snt, syn_ect_from_ace(value))
    return SynAckResult(EcnMode.ACCECN, ce=valid, ace_fail=not valid, syn_ect_rcv=ip)


def after_crossed_syn(mode: EcnMode, flags: int) -> EcnMode:
    """Simultaneous open: the peer's SYN decides as a SYN-ACK would (tcp_ecn_rcv_syn)."""
    if mode is EcnMode.PENDING:
        mode = EcnMode.ACCECN if accecn_syn_requested(flags) else EcnMode.RFC3168
    if mode is EcnMode.RFC3168 and flags & (wtcp.ECE | wtcp.CWR) != wtcp.ECE | wtcp.CWR:
        return EcnMode.DISABLED
    return mode


class ThirdAck(NamedTuple):
    """The listener's reading of the handshake's last ACK (tcp_accecn_third_ack)."""

    #: ACE 000: the feedback is broken (ACE failure on receive).
    ace_fail: bool = False
    #: It feeds back a CE mark on our SYN-ACK: one CE delivered.
    ce: bool = False


def third_ack(flags: int, pure_ack: bool, syn_ect_snt: int,
              fallback: bool = True) -> ThirdAck:
    """RFC 9768 Table 4: 000 is invalid; 001, 101, 111 are unused but legal; otherwise
    the first pure ACK feeds back the IP ECN field of our SYN-ACK."""
    value = wtcp.ace(flags)
    if value == 0:
        return ThirdAck(ace_fail=True)
    if value in (0b001, 0b101, 0b111) or not pure_ack:
        return ThirdAck()
    seen = syn_ect_from_ace(value)
    if fallback and not ect_transition_valid(syn_ect_snt, seen):
        return ThirdAck(ace_fail=True)
    return ThirdAck(ce=seen == ecn.CE)


def ece_is_echo(mode: EcnMode, flags: int) -> bool:
    """An RFC 3168 echo of congestion: ECE on a non-SYN of a classic ECN connection
    (tcp_ecn_rcv_ecn_echo).  On any other connection ECE means nothing."""
    return bool(flags & wtcp.ECE) and not flags & wtcp.SYN and mode is EcnMode.RFC3168


# ------------------------------------------------------------ RFC 3168 feedback
# Its own __init__ (init=False): the one dataclass generates runs interpreted under mypyc.
@dataclass(slots=True, init=False)
class Rfc3168:
    """Classic ECN's per-connection flags (tp->ecn_flags: TCP_ECN_DEMAND_CWR,
    TCP_ECN_QUEUE_CWR, TCP_ECN_SEEN) and their rules."""

    #: We saw CE: every ACK carries ECE until the peer's CWR.
    demand_cwr: bool
    #: We reduced cwnd for an ECE: the next new data segment carries CWR.
    queue_cwr: bool
    #: The peer's packets have been ECT (or CE).
    seen: bool

    def __init__(self, demand_cwr: bool = False, queue_cwr: bool = False,
                 seen: bool = False) -> None:
        self.demand_cwr = demand_cwr
        self.queue_cwr = queue_cwr
        self.seen = seen

    def on_data(self, ip_ecn: int) -> bool:
        """An arriving data segment's IP ECN field (tcp_data_ecn_check); True asks for
        quick ACKs: a first CE mark (the sender may be down to one segment), or Not-ECT
        after ECT, which is probably a retransmission."""
        codepoint = ip_ecn & ecn.MASK
        if codepoint == ecn.NOT_ECT:
            return self.seen
        self.seen = True
        if codepoint == ecn.CE and not self.demand_cwr:
            self.demand_cwr = True
            return True
        return False

    def on_cwr(self, has_data: bool) -> bool:
        """The peer set CWR (tcp_ecn_accept_cwr): stop echoing ECE; a data segment with
        CWR is ACKed at once, its sender's cwnd may be tiny."""
        self.demand_cwr = False
        return has_data

    def on_reduction(self) -> None:
        """cwnd was reduced (tcp_init_cwnd_reduction: tcp_ecn_queue_cwr)."""
        self.queue_cwr = True

    def on_undo(self) -> None:
        """The reduction was undone (tcp_ecn_withdraw_cwr)."""
        self.queue_cwr = False


class Outgoing(NamedTuple):
    """The ECN marks of one outgoing segment (tcp_ecn_send)."""

    ip_ecn: int
    #: TCP flags to set: ECE and/or CWR (RFC 3168), or the ACE value (AccECN).
    flags: int


def outgoing(mode: EcnMode, *, new_data: bool, rfc3168: Rfc3168 | None = None,
             receiver: AccEcnReceiver | None = None, ace_fail_recv: bool = False,
             ect_1: bool = False, ca_needs_ecn: bool = False) -> Outgoing:
    """tcp_ecn_send for an established connection.  RFC 3168: only new data is ECT and
    may carry the queued CWR (pure ACKs and retransmissions are Not-ECT, unless the
    congestion control wants every packet ECT); ECE while CE is being echoed.  AccECN:
    every segment is ECT unless the peer's ACE feedback failed, and carries ACE.
    ``ect_1``: the congestion control asks for ECT(1) (L4S)."""
    ect = ecn.ECT_1 if ect_1 else ecn.ECT_0
    if mode is EcnMode.ACCECN:
        ace = receiver.ace() if receiver is not None else CEP_INIT
        return Outgoing(ecn.NOT_ECT if ace_fail_recv else ect, wtcp.with_ace(0, ace))
    if mode is not EcnMode.RFC3168 or rfc3168 is None:
        return Outgoing(ecn.NOT_ECT, 0)
    flags = 0
    if new_data:
        ip = ect
        if rfc3168.queue_cwr:
            rfc3168.queue_cwr = False
            flags |= wtcp.CWR
    else:
        ip = ect if ca_needs_ecn else ecn.NOT_ECT
    if rfc3168.demand_cwr:
        flags |= wtcp.ECE
    return Outgoing(ip, flags)


# ---------------------------------------------------------------- the data receiver
class OptionSeen(enum.IntEnum):
    """What the peer's AccECN options have shown (TCP_ACCECN_OPT_*_SEEN)."""

    NOT_SEEN = 0
    EMPTY = 1
    COUNTER = 2
    FAIL = 3


def option_seen(option: AccEcnOption) -> OptionSeen:
    """tcp_accecn_option_init: an option whose first or third field is zero was zeroed
    on the path (those counters start at 1)."""
    fields = option.fields
    if not fields:
        return OptionSeen.EMPTY
    if fields[0] == 0:
        return OptionSeen.FAIL
    if len(fields) < 3:
        return OptionSeen.COUNTER
    return OptionSeen.FAIL if fields[2] == 0 else OptionSeen.COUNTER


def _init_offset(codepoint: int) -> int:
    return {ecn.ECT_1: E1B_INIT, ecn.ECT_0: E0B_INIT, ecn.CE: CEB_INIT}.get(codepoint, 0)


def _option_field_codepoint(position: int, kind: int) -> int:
    """tcp_accecn_optfield_to_ecnfield: which counter the option's ``position``th field is."""
    order = (ecn.ECT_1, ecn.CE, ecn.ECT_0) if kind == ACCECN1 else (ecn.ECT_0, ecn.CE, ecn.ECT_1)
    return order[position % 3]


#: The option field a counter needs (tcp_ecnfield_to_accecn_optfield, Linux's order 1:
#: ECT(1) first, CE second, ECT(0) third): the minimum option length to report it.
_FIELDS_NEEDED = {ecn.NOT_ECT: 0, ecn.ECT_1: 1, ecn.CE: 2, ecn.ECT_0: 3}


def zero_bytes_per_codepoint() -> dict[int, int]:
    """A fresh set of the three AccECN byte counters (ECT(1), ECT(0), CE), each 0: what
    a receiver counts and a sender learns from the option."""
    return {ecn.ECT_1: 0, ecn.ECT_0: 0, ecn.CE: 0}


# Its own __init__ (init=False): the one dataclass generates runs interpreted under mypyc.
@dataclass(slots=True, init=False)
class AccEcnReceiver:
    """The data receiver's counters, fed back by ACE and the option (RFC 9768 §3.2)."""

    #: CE-marked packets received (r.cep without its offset), pure ACKs included.
    received_ce: int
    #: CE marks not yet fed back, at most 15.
    received_ce_pending: int
    #: Payload bytes received per IP ECN codepoint (ECT(1), ECT(0), CE), 32-bit.
    received_bytes: dict[int, int]
    prev_ecnfield: int
    #: Options still owed (a change of ECN field, a CE mark: two in a row).
    opt_demand: int
    #: The fewest option fields that report what changed since the last option.
    minlen: int
    #: When the last option went out (µs; for the beacon).
    opt_sent_at: int | None

    def __init__(self, received_ce: int = 0, received_ce_pending: int = 0,
                 received_bytes: dict[int, int] | None = None,
                 prev_ecnfield: int = ecn.NOT_ECT, opt_demand: int = 0, minlen: int = 0,
                 opt_sent_at: int | None = None) -> None:
        self.received_ce = received_ce
        self.received_ce_pending = received_ce_pending
        self.received_bytes = (received_bytes if received_bytes is not None
                               else zero_bytes_per_codepoint())
        self.prev_ecnfield = prev_ecnfield
        self.opt_demand = opt_demand
        self.minlen = minlen
        self.opt_sent_at = opt_sent_at

    def on_segment(self, ip_ecn: int, payload_len: int, segs: int = 1,
                   accecn: bool = True) -> bool:
        """Count one arriving segment (tcp_ecn_received_counters); True asks for an ACK
        at once (the ECN field changed on an AccECN connection)."""
        codepoint = ip_ecn & ecn.MASK
        is_ce = codepoint == ecn.CE
        if codepoint != ecn.NOT_ECT:
            count = max(1, segs) if is_ce else 0
            self.received_ce = (self.received_ce + count) & MASK32
            self.received_ce_pending = min(self.received_ce_pending + count, 0xF)
            if payload_len > 0:
                old = self.received_bytes[codepoint]
                new = (old + payload_len) & MASK32
                self.received_bytes[codepoint] = new
                self.minlen = max(self.minlen, _FIELDS_NEEDED[codepoint])
                if (new ^ old) & ~((1 << 22) - 1) & MASK32:
                    # an option at least once per 2^22 bytes of any counter
                    self.opt_demand = max(self.opt_demand, 1)
        edge = self.prev_ecnfield != codepoint
        ack_now = False
        if edge or is_ce:
            self.prev_ecnfield = codepoint
            if accecn:
                ack_now = edge
                self.opt_demand = 2
        return ack_now

    def ace(self) -> int:
        """The ACE value of an outgoing segment (tcp_accecn_set_ace); it feeds back every
        pending mark."""
        self.received_ce_pending = 0
        return (self.received_ce + CEP_INIT) & ACE_MASK

    def ack_now(self) -> bool:
        """Enough marks wait that the 3-bit ACE could wrap: ACK now."""
        return self.received_ce_pending >= ACE_MAX_DELTA

    def option(self, num_fields: int, now_us: int, kind: int = ACCECN1) -> AccEcnOption:
        """The option with ``num_fields`` counters, Linux's order by default (kind 174:
        EE1B ECEB EE0B), and the bookkeeping tcp_options_write does when it goes out."""
        values = {c: (self.received_bytes[c] + _init_offset(c)) & MASK24
                  for c in (ecn.ECT_1, ecn.ECT_0, ecn.CE)}
        fields = tuple(values[_option_field_codepoint(i, kind)] for i in range(num_fields))
        self.minlen = 0
        self.opt_sent_at = now_us
        if self.opt_demand:
            self.opt_demand -= 1
        return AccEcnOption(kind, fields)


def synack_option(num_fields: int, kind: int = ACCECN1) -> AccEcnOption:
    """The option of a SYN-ACK: nothing counted yet, the initial values only
    (synack_ecn_bytes)."""
    return AccEcnOption(kind, tuple((_init_offset(_option_field_codepoint(i, kind)))
                                    for i in range(num_fields)))


def beacon_due(now_us: int, sent_at_us: int | None, srtt_us: int, beacon: int) -> bool:
    """tcp_accecn_option_beacon_check: ``beacon`` options per smoothed RTT at least."""
    if not beacon:
        return False
    since = now_us - (sent_at_us or 0)
    return since * beacon >= srtt_us


def wants_option(ecn_option: int, saw_opt: OptionSeen, send_failed: bool, demand: int,
                 beacon: bool) -> bool:
    """Does an established AccECN connection put the option on this segment
    (tcp_established_options)?  Only once the peer showed it uses it, not after it was
    lost on the path (unless PERSIST), and for MINIMUM only on demand or as a beacon."""
    if not ecn_option or saw_opt is OptionSeen.NOT_SEEN:
        return False
    if send_failed and ecn_option < EcnOption.PERSIST:
        return False
    return ecn_option >= EcnOption.FULL or bool(demand) or beacon


class OptionFit(NamedTuple):
    """How much of the option fits (tcp_options_fit_accecn)."""

    num_fields: int       #: -1: it does not fit with the fields required
    size: int             #: option space it takes beyond what it shares with padding
    num_sack_blocks: int  #: SACK blocks left (one may give way to the option)


def fit_option(required: int, remaining: int, num_sack_blocks: int = 0,
               combine_saving: int | None = None) -> OptionFit:
    """The most fields (at least ``required``) that fit ``remaining`` bytes of option
    space.  An option whose length is not a multiple of 4 shares its last bytes with the
    NOPs of other options when there is room (``combine_saving``: 2 before SACK blocks,
    a SYN-ACK's from tcp_synack_options_combine_saving); it may take one SACK block's
    room when more than two are sent."""
    if combine_saving is None:
        combine_saving = 2 if num_sack_blocks > 0 else 0
    size = OPTION_MAX_SIZE
    fields = OPTION_MAX_FIELDS
    rem = remaining
    reduced = 0
    while fields >= required:
        if size & 3 > combine_saving:
            aligned = (size + 3) & ~3
        else:
            aligned = size & ~3
        if rem >= aligned:
            size = aligned
            break
        if fields == required and num_sack_blocks > 2 and required > 0:
            num_sack_blocks -= 1
            reduced += 1
            rem += SACK_BLOCK_LEN
            fields, size = OPTION_MAX_FIELDS, OPTION_MAX_SIZE
            continue
        fields -= 1
        size -= ACCECN_FIELD_LEN
    if reduced:
        if fields >= required:
            size -= reduced * SACK_BLOCK_LEN
        else:
            num_sack_blocks += reduced
    if fields < required:
        return OptionFit(-1, 0, num_sack_blocks)
    return OptionFit(fields, size, num_sack_blocks)


def synack_combine_saving(sack_permitted: bool, timestamps: bool, window_scale: bool) -> int:
    """tcp_synack_options_combine_saving: NOPs a SYN-ACK's option can share."""
    if sack_permitted and not timestamps:
        return 2
    return 1 if window_scale else 0


# ------------------------------------------------------------------ the data sender
# Its own __init__ (init=False): the one dataclass generates runs interpreted under mypyc.
@dataclass(slots=True, init=False)
class AccEcnSender:
    """The data sender's view of the feedback: how many of its packets and bytes the
    receiver says arrived CE-marked (RFC 9768 §3.2.2, Linux __tcp_accecn_process)."""

    #: Packets delivered CE-marked (s.cep without its offset).
    delivered_ce: int
    #: Bytes delivered per codepoint, from the option (32-bit, 24-bit deltas).
    delivered_bytes: dict[int, int]
    #: The codepoint new bytes are assumed to carry, learnt from the option (0: unsure).
    est_ecnfield: int
    saw_opt: OptionSeen
    #: The option cannot be trusted on receive (zeroed, or too late to start).
    opt_fail_recv: bool
    #: Packets acknowledged per ACK, smoothed (<< EWMA_PREC).
    pkts_acked_ewma: int
    #: ``counters``' Counter, made on the first count (most connections never count).
    _counters: Counter[str] | None = field(init=False, repr=False, compare=False)

    def __init__(self, delivered_ce: int = 0, delivered_bytes: dict[int, int] | None = None,
                 est_ecnfield: int = 0, saw_opt: OptionSeen = OptionSeen.NOT_SEEN,
                 opt_fail_recv: bool = False, pkts_acked_ewma: int = 0,
                 counters: Counter[str] | None = None) -> None:
        self.delivered_ce = delivered_ce
        self.delivered_bytes = (delivered_bytes if delivered_bytes is not None
                                else zero_bytes_per_codepoint())
        self.est_ecnfield = est_ecnfield
        self.saw_opt = saw_opt
        self.opt_fail_recv = opt_fail_recv
        self.pkts_acked_ewma = pkts_acked_ewma
        self._counters = counters

    @property
    def counters(self) -> Counter[str]:
        """Impossible feedback seen (a zeroed option, ambiguous bytes, an ACE that may
        have wrapped), under rcunet's names; ``EcnState`` moves them to nstat."""
        if self._counters is None:
            self._counters = Counter()
        return self._counters

    def process_option(self, option: AccEcnOption | None, delivered_bytes: int,
                       slowpath: bool = True, bytes_sent: int = 0) -> bool:
        """Take the option's byte counters (tcp_accecn_process_option); True when the
        byte deltas can be used to check ACE."""
        if self.opt_fail_recv:
            return False
        if not slowpath or option is None:
            if self.saw_opt is OptionSeen.NOT_SEEN:
                if bytes_sent >= OPTION_LATE_BYTES:
                    self.saw_opt, self.opt_fail_recv = OptionSeen.FAIL, True
                return False
            if self.est_ecnfield:
                codepoint = self.est_ecnfield
                self.delivered_bytes[codepoint] = (
                    self.delivered_bytes[codepoint] + delivered_bytes) & MASK32
                return True
            return False
        if self.saw_opt < OptionSeen.COUNTER:
            self.saw_opt = option_seen(option)
            if self.saw_opt is OptionSeen.FAIL:
                self.opt_fail_recv = True
                self.counters["AccEcnOptionZeroed"] += 1
        estimate = self.est_ecnfield
        usable = bool(estimate)
        ambiguous = first_changed = False
        for position, value in enumerate(option.fields):
            codepoint = _option_field_codepoint(position, option.kind)
            delta = self._update_bytes(codepoint, value)
            if delta < 0:
                usable, ambiguous = False, True
            if delta and codepoint != estimate:
                if not first_changed:
                    self.est_ecnfield, first_changed = codepoint, True
                else:
                    usable, ambiguous = False, True
        if ambiguous:
            self.est_ecnfield = 0
            self.counters["AccEcnAmbiguousBytes"] += 1
        return usable

    def _update_bytes(self, codepoint: int, value: int) -> int:
        """tcp_update_ecn_bytes: the 24-bit field against the 32-bit counter; a delta with
        its 24th bit set is negative (a reordered option, or a lie)."""
        truncated = (value - _init_offset(codepoint)) & MASK24
        delta = (truncated - self.delivered_bytes[codepoint]) & MASK24
        if delta & 0x800000:
            delta -= 1 << 24
        self.delivered_bytes[codepoint] = (self.delivered_bytes[codepoint] + delta) & MASK32
        return delta

    def ce_delta(self, flags: int, option: AccEcnOption | None, delivered_pkts: int,
                 delivered_bytes: int, *, mss: int, progress: bool = True,
                 slowpath: bool = True, syn_acked: bool = False, sack: bool = True,
                 open_or_cwr: bool = True, bytes_sent: int = 0) -> int:
        """Newly CE-marked packets this ACK feeds back (tcp_accecn_process with
        __tcp_accecn_process), added to ``delivered_ce``.  ACE counts modulo 8: when an
        ACK covers more than 7 packets the count may have wrapped, and the option's CE
        bytes (or, without them, how compressed ACKs are) decide how many times."""
        old_ceb = self.delivered_bytes[ecn.CE]
        if not progress:
            return 0  # reordered ACK, or nothing to tell it apart
        opt_valid = self.process_option(option, delivered_bytes, slowpath, bytes_sent)
        if delivered_pkts:
            if not self.pkts_acked_ewma:
                ewma = delivered_pkts << EWMA_PREC
            else:
                ewma = self.pkts_acked_ewma
                ewma = (((ewma << EWMA_WEIGHT) - ewma) + (delivered_pkts << EWMA_PREC)) \
                    >> EWMA_WEIGHT
            self.pkts_acked_ewma = min(ewma, 0xFFFF)
        if not slowpath and delivered_pkts <= ACE_MASK:
            return 0
        if syn_acked:
            return 0  # no ACE during the handshake
        delta = self._wrapped_delta(wtcp.ace(flags), delivered_pkts, delivered_bytes,
                                    old_ceb, opt_valid, mss, sack, open_or_cwr)
        if delta:
            self.delivered_ce = (self.delivered_ce + delta) & MASK32
        return delta

    def _wrapped_delta(self, value: int, pkts: int, nbytes: int, old_ceb: int,
                       opt_valid: bool, mss: int, sack: bool, open_or_cwr: bool) -> int:
        delta = ((value - CEP_INIT) - self.delivered_ce) & ACE_MASK
        if pkts <= ACE_MASK:
            return delta
        safe_delta = pkts - ((pkts - delta) & ACE_MASK)
        if safe_delta != delta:
            self.counters["AccEcnAceMayHaveWrapped"] += 1
        if opt_valid:
            d_ceb = (self.delivered_bytes[ecn.CE] - old_ceb) & MASK32
            if not d_ceb:
                return delta
            if pkts >= (ACE_MASK + 1) * 2 and (sack or open_or_cwr):
                if nbytes <= d_ceb:
                    return safe_delta
                est_d_cep = -(-d_ceb * pkts // nbytes)
                return min(safe_delta, delta + (est_d_cep & ~ACE_MASK))
            if d_ceb > delta * mss:
                return safe_delta
            if d_ceb < (safe_delta * mss) >> SAFETY_SHIFT:
                return delta
        elif self.pkts_acked_ewma > (ACK_COMP_THRESH << EWMA_PREC):
            return delta
        return safe_delta


__all__ = [
    "ACCECN0", "ACCECN1", "AccEcnReceiver", "AccEcnSender", "Answer", "EcnMode", "EcnOption",
    "EcnSysctls", "OptionFit", "OptionSeen", "SynAckResult", "SynRequest", "TcpEcn", "ThirdAck",
    "accecn_syn_requested", "after_crossed_syn", "after_synack", "answer_syn", "beacon_due",
    "Outgoing", "Rfc3168", "ece_is_echo", "outgoing", "ect_transition_valid", "fit_option",
    "option_seen", "reflector_ace", "retransmitted_syn_flags", "syn_ect_from_ace",
    "syn_request", "synack_combine_saving", "synack_flags", "synack_option", "third_ack",
    "wants_option",
]
