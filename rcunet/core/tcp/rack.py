"""RACK-TLP (RFC 8985) as Linux has it: time-based loss marking with a reordering window
that DSACKs widen (net/ipv4/tcp_recovery.c, tcp_rack_update_reo_wnd and tcp_dsack_seen in
tcp_input.c), and the tail loss probe's decisions (tcp_schedule_loss_probe,
tcp_send_loss_probe in tcp_output.c, tcp_process_tlp_ack in tcp_input.c).

A segment is lost when a segment sent after it has been delivered and it is still
unacknowledged RACK.rtt + reo_wnd after it was sent.  Times are microseconds, as Linux's
tcp_mstamp (an ``srtt_us`` here is the smoothed RTT itself, Linux's tp->srtt_us >> 3);
sequence numbers are 32-bit.  Pure: the caller keeps ``RackState`` and hands
in its segments in the order they were (re)sent.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from rcunet.core.tcp.prr import CaState
from rcunet.wire.seqnum import gt, lt

#: net.ipv4.tcp_recovery bits (TCP_RACK_*).
RACK_LOSS_DETECTION = 0x1
RACK_STATIC_REO_WND = 0x2
RACK_NO_DUPTHRESH = 0x4
#: Keep a widened reo_wnd for this many recoveries (TCP_RACK_RECOVERY_THRESH).
RECOVERY_THRESH = 16
#: TCP_TIMEOUT_MIN_US: the timers' floor and the TLP's allowance for a delayed ACK.
TIMEOUT_MIN_US = 2000
#: TCP_TIMEOUT_INIT: the probe timeout without an RTT sample.
TIMEOUT_INIT_US = 1_000_000
#: net.ipv4.tcp_early_retrans values with TLP on (3, Linux's default, and 4).
TLP_EARLY_RETRANS = (3, 4)


def sent_after(t1: int, t2: int, seq1: int, seq2: int) -> bool:
    """tcp_skb_sent_after: sent later, the end sequence breaking ties within a burst."""
    return t1 > t2 or (t1 == t2 and gt(seq1, seq2))


# Its own __init__ (init=False): the one dataclass generates runs interpreted under mypyc.
@dataclass(slots=True, init=False)
class RackState:
    """tp->rack: the most recently sent segment known delivered, and the window."""

    #: When that segment was (re)sent (0: nothing delivered yet).
    xmit_time: int
    #: Its end sequence number.
    end_seq: int
    #: The RTT the last ACKed or SACKed segment measured (tp->rack.rtt_us).
    rtt_us: int
    #: That segment's send time and end sequence (``detect_loss``'s tie-break).
    rtt_xmit_time: int
    rtt_end_seq: int
    #: Advanced since the last loss marking (mark_lost has work to do).
    advanced: bool
    #: The window in steps of min_rtt/4.
    reo_wnd_steps: int
    #: Recoveries left before the window shrinks back.
    reo_wnd_persist: int
    #: A DSACK arrived since the window was last widened.
    dsack_seen: bool
    #: tp->delivered when it was last widened.
    last_delivered: int

    def __init__(self, xmit_time: int = 0, end_seq: int = 0, rtt_us: int = 0,
                 rtt_xmit_time: int = 0, rtt_end_seq: int = 0, advanced: bool = False,
                 reo_wnd_steps: int = 1, reo_wnd_persist: int = 0,
                 dsack_seen: bool = False, last_delivered: int = 0) -> None:
        self.xmit_time = xmit_time
        self.end_seq = end_seq
        self.rtt_us = rtt_us
        self.rtt_xmit_time = rtt_xmit_time
        self.rtt_end_seq = rtt_end_seq
        self.advanced = advanced
        self.reo_wnd_steps = reo_wnd_steps
        self.reo_wnd_persist = reo_wnd_persist
        self.dsack_seen = dsack_seen
        self.last_delivered = last_delivered

    def advance(self, xmit_time: int, end_seq: int, now: int, retransmitted: bool,
                min_rtt_us: int) -> None:
        """A segment was (S)ACKed (tcp_rack_advance).  A retransmission ACKed sooner than
        min_rtt after it was resent is ambiguous (the original may be what arrived):
        it does not count."""
        rtt_us = now - xmit_time
        if retransmitted and rtt_us < min_rtt_us:
            return
        self.advanced = True
        self.rtt_us = rtt_us
        self.rtt_xmit_time, self.rtt_end_seq = xmit_time, end_seq
        if sent_after(xmit_time, self.xmit_time, end_seq, self.end_seq):
            self.xmit_time, self.end_seq = xmit_time, end_seq

    def reo_wnd(self, *, reord_seen: bool, ca_state: CaState, sacked_out: int,
                reordering: int, min_rtt_us: int, srtt_us: int,
                tcp_recovery: int = RACK_LOSS_DETECTION) -> int:
        """tcp_rack_reo_wnd: no window before any reordering was seen once in recovery or
        once the dupack threshold is met (unless tcp_recovery's NO_DUPTHRESH bit);
        otherwise min_rtt/4 per step, at most the smoothed RTT."""
        if not reord_seen:
            if ca_state >= CaState.RECOVERY:
                return 0
            if sacked_out >= reordering and not tcp_recovery & RACK_NO_DUPTHRESH:
                return 0
        return min((min_rtt_us >> 2) * self.reo_wnd_steps, srtt_us)

    def update_reo_wnd(self, prior_delivered: int, delivered: int,
                       tcp_recovery: int = RACK_LOSS_DETECTION) -> None:
        """tcp_rack_update_reo_wnd, per ACK: a DSACK since the last widening (and a round
        trip since) widens the window one step and keeps it for RECOVERY_THRESH
        recoveries; once those are used up it is back to one step."""
        if tcp_recovery & RACK_STATIC_REO_WND or not prior_delivered:
            return
        if lt(prior_delivered, self.last_delivered):
            self.dsack_seen = False  # less than a round trip since the last widening
        if self.dsack_seen:
            self.reo_wnd_steps = min(0xFF, self.reo_wnd_steps + 1)
            self.dsack_seen = False
            self.last_delivered = delivered
            self.reo_wnd_persist = RECOVERY_THRESH
        elif not self.reo_wnd_persist:
            self.reo_wnd_steps = 1

    def recovery_not_undone(self) -> None:
        """tcp_try_undo_recovery found nothing to undo: one persisting recovery used."""
        if self.reo_wnd_persist:
            self.reo_wnd_persist -= 1

    def dsack_undo(self) -> None:
        """tcp_try_undo_dsack: DSACKs showed every retransmission spurious; the window
        persists one recovery longer."""
        self.reo_wnd_persist = min(RECOVERY_THRESH, self.reo_wnd_persist + 1)


class Segment(NamedTuple):
    """What loss detection needs of one sent, not yet (S)ACKed segment."""

    xmit_time: int
    end_seq: int
    #: Marked lost and not retransmitted since: nothing to decide.
    lost_unretransmitted: bool = False


class Detection(NamedTuple):
    """tcp_rack_detect_loss's result."""

    #: Indices (into the segments given) now lost.
    lost: tuple[int, ...]
    #: The longest any other segment must still wait (µs; 0: none waits).
    reo_timeout: int


def detect_loss(rack: RackState, segments: Iterable[Segment], now: int,
                reo_wnd: int) -> Detection:
    """Walk the segments in send order; each sent before the RACK segment is lost once
    RACK.rtt + reo_wnd have passed since it was sent (tcp_rack_detect_loss).

    A burst shares one timestamp on the virtual clock, where a real clock stamps each
    segment a little later than the one before: a segment sent in the same burst after
    the one whose RTT is RACK.rtt has waited a little less than that RTT, so at exactly
    RACK.rtt (+ reo_wnd) it is not yet lost in Linux -- its wait is still positive."""
    lost: list[int] = []
    timeout = 0
    for index, seg in enumerate(segments):
        if seg.lost_unretransmitted:
            continue
        if not sent_after(rack.xmit_time, seg.xmit_time, rack.end_seq, seg.end_seq):
            break
        remaining = rack.rtt_us + reo_wnd - (now - seg.xmit_time)
        if remaining == 0 and sent_after(seg.xmit_time, rack.rtt_xmit_time, seg.end_seq,
                                         rack.rtt_end_seq):
            remaining = 1  # sent after the RTT's segment within its burst
        if remaining <= 0:
            lost.append(index)
        else:
            timeout = max(timeout, remaining)
    return Detection(tuple(lost), timeout)


class Marking(NamedTuple):
    """tcp_rack_mark_lost's result."""

    lost: tuple[int, ...]
    #: Arm the reordering timer this far ahead (µs), or None.
    reo_timer: int | None


def mark_lost(rack: RackState, segments: Iterable[Segment], now: int,
              reo_wnd: int) -> Marking:
    """Run loss detection only when RACK advanced since the last run; a segment still
    inside its window arms the reordering timer (remaining + TCP_TIMEOUT_MIN_US)."""
    if not rack.advanced:
        return Marking((), None)
    rack.advanced = False
    found = detect_loss(rack, segments, now, reo_wnd)
    timer = found.reo_timeout + TIMEOUT_MIN_US if found.reo_timeout else None
    return Marking(found.lost, timer)


class Dsack(NamedTuple):
    """tcp_dsack_seen's verdict on one DSACK block."""

    #: Duplicate segments it reports (0: ignored).
    dup_segs: int
    #: It reports the tail loss probe's duplicate (FLAG_DSACK_TLP).
    tlp: bool = False
    #: It may widen RACK's window (reordering seen, not a TLP duplicate).
    widens_reo_wnd: bool = False
    #: Why it was ignored ("" when taken): rcunet counts these.
    ignored: str = ""


def dsack_seen(start_seq: int, end_seq: int, *, max_window: int, mss: int,
               tlp_high_seq: int, dsack_dups: int, total_retrans: int,
               reord_seen: bool) -> Dsack:
    """Judge a DSACK block (tcp_dsack_seen).  An empty or inverted block, one larger
    than any window we were offered, or one reporting more duplicates than we ever
    retransmitted (a DSACK flood) is ignored.  ``dsack_dups`` is the count before it."""
    if not lt(start_seq, end_seq):
        return Dsack(0, ignored="empty")
    length = (end_seq - start_seq) & 0xFFFFFFFF
    if length > max_window:
        return Dsack(0, ignored="beyond-window")
    dup_segs, tlp = 1, False
    if length > mss:
        dup_segs = -(-length // mss)
    elif tlp_high_seq and tlp_high_seq == end_seq:
        tlp = True
    if dsack_dups + dup_segs > total_retrans:
        return Dsack(0, tlp=tlp, ignored="more-than-retransmitted")
    return Dsack(dup_segs, tlp=tlp, widens_reo_wnd=reord_seen and not tlp)


# ------------------------------------------------------------------ tail loss probe
def may_schedule_probe(*, early_retrans: int, packets_out: int, sack: bool,
                       ca_state: CaState, fastopen_pending: bool = False) -> bool:
    """tcp_schedule_loss_probe's conditions: TLP enabled, data out, SACK, and Open or
    CWR (not in recovery or loss), and not a Fast Open child before its handshake."""
    return (not fastopen_pending and early_retrans in TLP_EARLY_RETRANS and packets_out > 0
            and sack and ca_state in (CaState.OPEN, CaState.CWR))


def probe_timeout(*, srtt_us: int, packets_out: int, rto_min_us: int,
                  rto_remaining_us: int) -> int:
    """The probe timeout (µs): 2*SRTT, plus the minimum RTO when a single segment is out
    (its ACK may be delayed) or TCP_TIMEOUT_MIN otherwise; 1 s without an RTT sample;
    never later than the RTO would fire (tcp_schedule_loss_probe)."""
    if srtt_us:
        timeout = 2 * srtt_us + (rto_min_us if packets_out == 1 else TIMEOUT_MIN_US)
    else:
        timeout = TIMEOUT_INIT_US
    if rto_remaining_us > 0:
        timeout = min(timeout, rto_remaining_us)
    return timeout


class Probe(enum.Enum):
    """What the loss probe timer does (tcp_send_loss_probe)."""

    #: A probe is already out (tlp_high_seq set): just rearm the RTO.
    REARM = enum.auto()
    #: Send one new segment, if the window allows.
    NEW_DATA = enum.auto()
    #: Retransmit the last segment sent (its last MSS).
    RETRANSMIT_LAST = enum.auto()


def probe_action(*, tlp_high_seq: int, new_data_fits: bool) -> Probe:
    """At most one probe outstanding; new data first, else the highest segment."""
    if tlp_high_seq:
        return Probe.REARM
    return Probe.NEW_DATA if new_data_fits else Probe.RETRANSMIT_LAST


class TlpAck(enum.Enum):
    """What an ACK during a TLP episode means (tcp_process_tlp_ack)."""

    #: Not past the probe yet: the episode goes on.
    PENDING = enum.auto()
    #: The episode ends, nothing was lost (new data probed, the probe DSACKed, or a
    #: pure duplicate ACK: both original and probe arrived).
    NO_LOSS = enum.auto()
    #: The probe repaired a loss: reduce cwnd (init reduction, CWR, end reduction).
    LOSS = enum.auto()


def tlp_ack(ack: int, *, tlp_high_seq: int, tlp_retrans: bool, dsack_tlp: bool,
            snd_una_advanced: bool, not_dup: bool, data_sacked: bool) -> TlpAck:
    """tcp_process_tlp_ack, for an ACK while tlp_high_seq is set."""
    if lt(ack, tlp_high_seq):
        return TlpAck.PENDING
    if not tlp_retrans or dsack_tlp:
        return TlpAck.NO_LOSS
    if gt(ack, tlp_high_seq):
        return TlpAck.LOSS
    if not (snd_una_advanced or not_dup or data_sacked):
        return TlpAck.NO_LOSS
    return TlpAck.PENDING
