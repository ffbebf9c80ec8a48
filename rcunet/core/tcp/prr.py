"""Proportional Rate Reduction (RFC 9937) as Linux's tcp_cwnd_reduction computes it, and
the reduction episode around it: tcp_init_cwnd_reduction, tcp_enter_cwr and
tcp_end_cwnd_reduction (net/ipv4/tcp_input.c).

While the data in flight is above ssthresh, PRR sends in proportion to what is
delivered, ssthresh/prior_cwnd of it, so the reduction is spread over one round trip.
Once at or below ssthresh it sends what is delivered (conservation); on a "safe" ACK --
SND.UNA advanced and nothing newly marked lost -- one segment more, slow-starting back
up to ssthresh (RFC 9937's PRR-SSRB; PRR-CRB otherwise).

Units are the caller's: Linux counts packets (``mss=1``); a byte-counting engine passes
its MSS, which is what "one segment more" adds.  Pure: no clock, no connection.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: Linux TCP_INFINITE_SSTHRESH: ssthresh not set yet.
INFINITE_SSTHRESH = 0x7FFFFFFF


class CaState(enum.IntEnum):
    """Linux's congestion-avoidance states (tcp_ca_state), in their order."""

    OPEN = 0
    DISORDER = 1
    CWR = 2
    RECOVERY = 3
    LOSS = 4


def sndcnt(ssthresh: int, prior_cwnd: int, prr_delivered: int, prr_out: int,
           in_flight: int, newly_acked_sacked: int, newly_lost: int,
           snd_una_advanced: bool, mss: int = 1) -> int:
    """How much an ACK lets out during a reduction (tcp_cwnd_reduction's sndcnt), with
    ``prr_delivered`` already counting this ACK's ``newly_acked_sacked``."""
    delta = ssthresh - in_flight
    if delta < 0:
        # proportional: ceil(ssthresh * prr_delivered / prior_cwnd) - prr_out
        count = (ssthresh * prr_delivered + prior_cwnd - 1) // prior_cwnd - prr_out
    else:
        count = max(prr_delivered - prr_out, newly_acked_sacked)
        if snd_una_advanced and not newly_lost:
            count += mss  # PRR-SSRB: slow start back up to ssthresh
        count = min(delta, count)
    # "Force a fast retransmit upon entering fast recovery"
    return max(count, 0 if prr_out else mss)


@dataclass(slots=True)
class Reduction:
    """One cwnd reduction episode (CWR or Recovery): tp->prior_cwnd, prr_delivered and
    prr_out with the ssthresh it aims at."""

    ssthresh: int
    prior_cwnd: int
    #: Delivered (ACKed or SACKed) since the episode began.
    delivered: int = 0
    #: Sent (new data and retransmissions) since the episode began.
    out: int = 0

    @classmethod
    def begin(cls, cwnd: int, ssthresh: int) -> Reduction:
        """tcp_init_cwnd_reduction: the congestion control's ssthresh has been taken;
        the caller also sets high_seq = SND.NXT, clears tlp_high_seq and queues CWR."""
        return cls(ssthresh=ssthresh, prior_cwnd=cwnd)

    def on_ack(self, in_flight: int, newly_acked_sacked: int, newly_lost: int,
               snd_una_advanced: bool, mss: int = 1) -> int | None:
        """The new cwnd after an ACK (in flight + sndcnt), or None when it delivered
        nothing and cwnd stays (tcp_cwnd_reduction)."""
        if newly_acked_sacked <= 0 or not self.prior_cwnd:
            return None
        self.delivered += newly_acked_sacked
        return in_flight + sndcnt(self.ssthresh, self.prior_cwnd, self.delivered, self.out,
                                  in_flight, newly_acked_sacked, newly_lost,
                                  snd_una_advanced, mss)

    def sent(self, amount: int) -> None:
        """Data went out during the episode (tcp_event_new_data_sent and
        tcp_retransmit_skb add to prr_out)."""
        self.out += amount


def cwnd_at_end(cwnd: int, ssthresh: int, state: CaState, undo_marker: bool,
                cong_control: bool = False) -> int:
    """tcp_end_cwnd_reduction: cwnd falls to ssthresh when CWR ends, or Recovery ends
    without having been undone; a congestion control with its own cong_control (BBR)
    keeps its cwnd."""
    if cong_control:
        return cwnd
    if ssthresh < INFINITE_SSTHRESH and (state is CaState.CWR or undo_marker):
        return ssthresh
    return cwnd


def enters_cwr(state: CaState) -> bool:
    """tcp_enter_cwr: an ECN echo starts a reduction (with undo disabled: congestion is
    proven) only from Open or Disorder; CWR, Recovery and Loss already reduce."""
    return state < CaState.CWR


def cwr_ends(state: CaState, snd_una: int, high_seq: int) -> bool:
    """tcp_fastretrans_alert: CWR ends once something *above* high_seq is ACKed, so the
    CWR flag has reached the receiver (``snd_una`` at or past ``high_seq``, not equal)."""
    return state is CaState.CWR and (snd_una - high_seq) & 0xFFFFFFFF < 0x80000000 \
        and snd_una != high_seq
