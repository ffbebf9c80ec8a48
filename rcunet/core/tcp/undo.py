"""Undoing a cwnd reduction that proved unnecessary, and F-RTO (RFC 5682), as Linux's
tcp_input.c decides them: timestamp undo (tcp_packet_delayed: the ACK echoes a timestamp
from before our first retransmission, so the original arrived), DSACK undo (every
retransmission reported duplicate), tcp_undo_cwnd_reduction's arithmetic, and the ACK
steps of tcp_process_loss after an RTO.

Pure: the caller passes the connection's fields (retrans_stamp and TSecr in the
timestamp clock, sequence numbers 32-bit) and applies the result.
"""

from __future__ import annotations

import enum
from typing import NamedTuple

from rcunet.core.tcp.prr import CaState
from rcunet.wire.seqnum import ge, gt, lt


def tsecr_before(tsecr: int | None, when: int) -> bool:
    """tcp_tsopt_ecr_before: the ACK echoes a (non-zero) timestamp older than ``when``."""
    return bool(tsecr) and lt(tsecr or 0, when)


def packet_delayed(*, retrans_stamp: int, tsecr: int | None, sack: bool, snd_una: int,
                   high_seq: int, syn_sent: bool = False) -> bool:
    """tcp_packet_delayed: was the "lost" data merely delayed?  With a retransmission out,
    when the echoed timestamp predates the first one; with none (retrans_stamp 0), yes,
    except where Linux clears retrans_stamp after retransmitting (a non-SACK connection
    at high_seq, a SYN-SENT socket)."""
    if retrans_stamp:
        return tsecr_before(tsecr, retrans_stamp)
    if not sack and ge(snd_una, high_seq):
        return False
    return not syn_sent


def may_undo(*, undo_marker: int, undo_retrans: int, delayed: bool) -> bool:
    """tcp_may_undo: a reduction to undo, and either every retransmission was DSACKed
    (undo_retrans counted down to 0) or the data was only delayed."""
    return bool(undo_marker) and (not undo_retrans or delayed)


def dsack_undo(*, undo_marker: int, undo_retrans: int) -> bool:
    """tcp_try_undo_dsack: DSACKs acknowledged every retransmission."""
    return bool(undo_marker) and not undo_retrans


class Undone(NamedTuple):
    """cwnd and ssthresh after tcp_undo_cwnd_reduction."""

    cwnd: int
    ssthresh: int
    #: ssthresh went back up: a queued CWR is withdrawn (tcp_ecn_withdraw_cwr).
    withdraw_cwr: bool


def undo_reduction(*, cwnd: int, ssthresh: int, prior_ssthresh: int,
                   prior_cwnd: int) -> Undone:
    """The undone window: cwnd back to what it was before the reduction (Reno's and
    CUBIC's undo_cwnd: max(cwnd, prior_cwnd)) and ssthresh to the one saved when it
    began; nothing when prior_ssthresh is 0 (an ECN-triggered reduction, proven
    congestion, is never undone)."""
    if not prior_ssthresh:
        return Undone(cwnd, ssthresh, False)
    cwnd = max(cwnd, prior_cwnd)
    if prior_ssthresh > ssthresh:
        return Undone(cwnd, prior_ssthresh, True)
    return Undone(cwnd, ssthresh, False)


def frto_armed(*, tcp_frto: bool, ca_state: CaState, retransmits: int,
               mtu_probing: bool = False) -> bool:
    """tcp_enter_loss: F-RTO (RFC 5682 §3.1 step 1) for an RTO that does not interrupt a
    loss recovery, or that repeats on the same SND.UNA (§3.2); not while probing the
    path MTU.  ``ca_state`` is the state before the RTO."""
    return tcp_frto and (ca_state < CaState.RECOVERY or retransmits > 0) and not mtu_probing


class LossStep(enum.Enum):
    """What an ACK in the Loss state does (tcp_process_loss)."""

    UNDO = enum.auto()             #: the RTO was not needed (timestamps, DSACKs): undo
    SPURIOUS_RTO = enum.auto()     #: F-RTO step 3.b: never-retransmitted data ACKed
    SEND_NEW = enum.auto()         #: F-RTO step 2.b: send new data before deciding
    RECOVERED = enum.auto()        #: everything up to high_seq ACKed: leave Loss
    RETRANSMIT_LOST = enum.auto()  #: go on retransmitting what is marked lost


class LossDecision(NamedTuple):
    step: LossStep
    #: F-RTO still on after this ACK.
    frto: bool
    #: Set high_seq to SND.NXT (F-RTO step 2.b).
    high_seq_to_snd_nxt: bool = False


def loss_ack(*, frto: bool, snd_una: int, snd_nxt: int, high_seq: int,
             snd_una_advanced: bool, may_undo_now: bool, orig_sack_acked: bool,
             data_sacked: bool, dupack: bool, can_send_new: bool,
             fastopen_pending: bool = False) -> LossDecision:
    """tcp_process_loss for one ACK after an RTO."""
    recovered = ge(snd_una, high_seq)
    if (snd_una_advanced or fastopen_pending) and may_undo_now:
        return LossDecision(LossStep.UNDO, frto)
    if frto:
        if orig_sack_acked:
            return LossDecision(LossStep.SPURIOUS_RTO, frto)
        if gt(snd_nxt, high_seq):
            if data_sacked or dupack:
                frto = False  # step 3.a: the loss was real
        elif snd_una_advanced and not recovered:
            if can_send_new:
                return LossDecision(LossStep.SEND_NEW, True, True)
            return LossDecision(LossStep.RETRANSMIT_LOST, False, True)
    if recovered:
        return LossDecision(LossStep.RECOVERED, frto)
    return LossDecision(LossStep.RETRANSMIT_LOST, frto)
