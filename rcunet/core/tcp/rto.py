"""Retransmission timeout estimation as Linux computes it (tcp_rtt_estimator, tcp_set_rto)
and Linux's give-up rules.

RFC 6298 §2 smooths SRTT and RTTVAR and floors the sum: RTO = max(SRTT + 4 RTTVAR, 1 s).
Linux floors the variance term instead, per round trip: RTO = SRTT + max(4 mdev, rto_min)
(200 ms), so a path with a steady 100 ms RTT keeps a 300 ms RTO where RFC 6298 with a
200 ms floor would fall to 200 ms, and RTO is never below SRTT + rto_min.
"""

from __future__ import annotations

from rcunet.core.tcp.options import MS, SECOND
from rcunet.wire.seqnum import gt


class RtoEstimator:
    """SRTT, mdev and RTO of Linux tcp_rtt_estimator / tcp_set_rto (times in ns), with the
    exponential backoff of RFC 6298 §5.5.

    ``rttvar`` is the smoothed mean deviation (Linux ``mdev_us >> 2``, tcpi_rttvar);
    ``var`` the variance term added to SRTT (Linux ``rttvar_us``): the largest 4 * mdev of
    the last round trip, at least rto_min, decaying by a quarter per round trip.
    """

    __slots__ = ("srtt", "mdev4", "mdev_max", "var", "rtt_seq", "base_rto", "backoff",
                 "rto_min", "rto_max")

    def __init__(self, rto_initial: int, rto_min: int, rto_max: int) -> None:
        self.srtt: int | None = None
        self.mdev4 = 0  # 4 * mdev (Linux mdev_us)
        self.mdev_max = 0  # largest mdev4 in this round trip (Linux mdev_max_us)
        self.var = 0  # Linux rttvar_us
        self.rtt_seq: int | None = None  # the round trip ends when SND.UNA passes this
        self.base_rto = rto_initial  # RFC 6298 §2.1: 1 s before any measurement
        self.backoff = 0
        self.rto_min = rto_min
        self.rto_max = rto_max

    @property
    def rttvar(self) -> int:
        return self.mdev4 >> 2

    @property
    def rto(self) -> int:
        """The current timeout: base RTO doubled once per expiry, capped (RFC 6298 §5.5)."""
        return min(self.base_rto << self.backoff, self.rto_max)

    def on_sample(self, rtt: int, snd_una: int | None = None,
                  snd_nxt: int | None = None) -> None:
        """Fold in one RTT measurement (ns) as tcp_rtt_estimator does, then tcp_set_rto.

        ``snd_una``/``snd_nxt`` after the ACK delimit Linux's per-round-trip update of
        the variance term; without them (the handshake) every sample ends a round trip.
        """
        m = max(rtt, 0)
        if self.srtt is None:
            self.srtt = m
            self.mdev4 = 2 * m  # "make sure rto = 3 * rtt"
            self.var = self.mdev_max = max(self.mdev4, self.rto_min)
            self.rtt_seq = snd_nxt
        else:
            err = m - self.srtt
            self.srtt = max(self.srtt + err // 8, 0)  # srtt = 7/8 srtt + 1/8 new
            if err < 0:
                # RTT fell: a finer gain for mdev (alpha * beta), so RTO does not drop fast
                err = -err - (self.mdev4 >> 2)
                if err > 0:
                    err >>= 3
            else:
                err -= self.mdev4 >> 2
            self.mdev4 += err  # mdev = 3/4 mdev + 1/4 new
            if self.mdev4 > self.mdev_max:
                self.mdev_max = self.mdev4
                if self.mdev_max > self.var:
                    self.var = self.mdev_max
            if snd_una is None or self.rtt_seq is None or gt(snd_una, self.rtt_seq):
                if self.mdev_max < self.var:
                    self.var -= (self.var - self.mdev_max) >> 2
                self.rtt_seq = snd_nxt
                self.mdev_max = self.rto_min
        self.base_rto = min(self.srtt + self.var, self.rto_max)  # tcp_set_rto, tcp_bound_rto
        self.backoff = 0  # RFC 6298 §5 (Karn): a valid sample ends the backoff

    def on_timeout(self) -> None:
        """RFC 6298 §5.5: back off the timer."""
        if (self.base_rto << self.backoff) < self.rto_max:
            self.backoff += 1


def retransmits_timed_out(retries: int, rto_base: int, rto_max: int) -> int:
    """How long Linux keeps retransmitting before giving up after ``retries`` (tcp_retries2).

    Linux ``retransmits_timed_out``/``tcp_model_timeout``: the time the backoff sequence
    starting at ``rto_base`` takes to reach ``retries`` expiries, doubling until rto_max.
    With rto_base 200 ms, rto_max 120 s and 15 retries this is 924.6 s.
    """
    thresh = (rto_max // rto_base).bit_length() - 1  # ilog2(TCP_RTO_MAX / rto_base)
    if retries <= thresh:
        return ((2 << retries) - 1) * rto_base
    return ((2 << thresh) - 1) * rto_base + (retries - thresh) * rto_max


__all__ = ["MS", "RtoEstimator", "retransmits_timed_out", "SECOND"]
