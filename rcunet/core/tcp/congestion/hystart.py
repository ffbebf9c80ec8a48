"""HyStart, the hybrid slow start of Linux's CUBIC (net/ipv4/tcp_cubic.c: hystart_update,
cubictcp_acked, bictcp_hystart_reset, hystart_ack_delay): slow start ends early, with
ssthresh set to the current cwnd, when either

* an ACK train -- ACKs no more than ``ack_delta_us`` apart -- has lasted longer than half
  the minimum RTT since the round began (the whole minimum RTT when paced, plus a cushion
  for TSO/GRO), so the window already fills the path; or
* the round's smallest RTT, after 8 samples, exceeds the minimum RTT by a clamped
  eighth of it (4-16 ms): a queue is building.

Only once cwnd reaches ``low_window`` (16) segments.  A round ends when SND.UNA passes
the SND.NXT it began with.  Times are microseconds; cwnd in segments.  ``Cubic`` runs
it on every ACK's RTT sample with the tcp_cubic module parameters (``cubic_params``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rcunet.core.tcp.congestion.cubic_params import ACK_TRAIN, DELAY
from rcunet.core.tcp.counters import Counters
from rcunet.wire.seqnum import gt

__all__ = ["ACK_TRAIN", "DELAY", "HyStart", "ack_delay_us", "delay_threshold_us"]

#: Delay detection waits for this many RTT samples per round (HYSTART_MIN_SAMPLES).
MIN_SAMPLES = 8
#: HYSTART_DELAY_THRESH's clamp of delay_min / 8 (µs).
DELAY_THRESH_MIN_US = 4000
DELAY_THRESH_MAX_US = 16000
NO_RTT = 0xFFFFFFFF
USEC_PER_SEC = 1_000_000


def ack_delay_us(pacing_rate: int, gso_max_size: int = 65536) -> int:
    """hystart_ack_delay: room for one TSO packet in flight and one in the qdisc at the
    pacing rate (bytes/s), at most 1 ms; 0 without a pacing rate."""
    if not pacing_rate:
        return 0
    return min(1000, gso_max_size * 4 * USEC_PER_SEC // pacing_rate)


def delay_threshold_us(delay_min_us: int) -> int:
    """HYSTART_DELAY_THRESH(delay_min >> 3)."""
    return min(max(delay_min_us >> 3, DELAY_THRESH_MIN_US), DELAY_THRESH_MAX_US)


# Its own __init__ (init=False): the one dataclass generates runs interpreted under mypyc.
@dataclass(slots=True, init=False)
class HyStart:
    """CUBIC's HyStart state (the hystart fields of struct bictcp, and delay_min)."""

    detect: int
    low_window: int
    ack_delta_us: int
    #: Slow start's end was found (until a loss resets it).
    found: bool
    round_start: int
    last_ack: int
    end_seq: int
    curr_rtt: int
    sample_cnt: int
    #: The smallest RTT seen (µs), 0 before any.
    delay_min: int
    #: Where what HyStart finds is counted, under nstat's names: the connection's own.
    counters: Counters = field(repr=False, compare=False)

    def __init__(self, detect: int = ACK_TRAIN | DELAY, low_window: int = 16,
                 ack_delta_us: int = 2000, found: bool = False, round_start: int = 0,
                 last_ack: int = 0, end_seq: int = 0, curr_rtt: int = NO_RTT,
                 sample_cnt: int = 0, delay_min: int = 0,
                 counters: Counters | None = None) -> None:
        self.detect = detect
        self.low_window = low_window
        self.ack_delta_us = ack_delta_us
        self.found = found
        self.round_start = round_start
        self.last_ack = last_ack
        self.end_seq = end_seq
        self.curr_rtt = curr_rtt
        self.sample_cnt = sample_cnt
        self.delay_min = delay_min
        self.counters = counters if counters is not None else Counters()

    def reset_round(self, now_us: int, snd_nxt: int) -> None:
        """bictcp_hystart_reset: a new round starts now and ends at ``snd_nxt``."""
        self.round_start = self.last_ack = now_us
        self.end_seq = snd_nxt
        self.curr_rtt = NO_RTT
        self.sample_cnt = 0

    def on_loss(self, now_us: int, snd_nxt: int) -> None:
        """cubictcp_state(TCP_CA_Loss): bictcp_reset and a new round."""
        self.found = False
        self.delay_min = 0
        self.reset_round(now_us, snd_nxt)

    def on_ack(self, *, now_us: int, rtt_us: int | None, snd_una: int, snd_nxt: int,
               cwnd: int, in_slow_start: bool, after_recovery: bool = False,
               pacing_rate: int = 0, paced: bool = False) -> int | None:
        """cubictcp_acked for an ACK with an RTT sample: the new ssthresh (the current
        cwnd) when slow start should end here, else None.  ``after_recovery``: within a
        second of CUBIC's epoch start, when delay samples are discarded."""
        if rtt_us is None or rtt_us < 0 or after_recovery:
            return None
        delay = rtt_us or 1
        if not self.delay_min or self.delay_min > delay:
            self.delay_min = delay
        if self.found or not in_slow_start or cwnd < self.low_window:
            return None
        return self._update(delay, now_us, snd_una, snd_nxt, cwnd, pacing_rate, paced)

    def _update(self, delay: int, now: int, snd_una: int, snd_nxt: int, cwnd: int,
                pacing_rate: int, paced: bool) -> int | None:
        """hystart_update."""
        if gt(snd_una, self.end_seq):
            self.reset_round(now, snd_nxt)
        if self.detect & ACK_TRAIN and now - self.last_ack <= self.ack_delta_us:
            self.last_ack = now
            threshold = self.delay_min + ack_delay_us(pacing_rate)
            if not paced:
                threshold >>= 1  # pacing may have spread the train over RTT/2
            if now - self.round_start > threshold:
                self.found = True
                self.counters.add("TcpExtTCPHystartTrainDetect")
                self.counters.add("TcpExtTCPHystartTrainCwnd", cwnd)
        if self.detect & DELAY:
            self.curr_rtt = min(self.curr_rtt, delay)
            if self.sample_cnt < MIN_SAMPLES:
                self.sample_cnt += 1
            elif self.curr_rtt > self.delay_min + delay_threshold_us(self.delay_min):
                self.found = True
                self.counters.add("TcpExtTCPHystartDelayDetect")
                self.counters.add("TcpExtTCPHystartDelayCwnd", cwnd)
        return cwnd if self.found else None
