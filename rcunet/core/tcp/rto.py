"""Retransmission timeout estimation (RFC 6298) and Linux's give-up rules.

Deviations from RFC 6298 §2.4, as in Linux: the floor is ``rto_min`` (200 ms), not 1 s,
and it bounds the variance term (SRTT + max(4 * RTTVAR, rto_min), tcp_set_rto).
"""

from __future__ import annotations

from rcunet.core.tcp.options import MS, SECOND

#: Clock granularity G of RFC 6298 §2: our timestamps tick in milliseconds.
GRANULARITY = 1 * MS


class RtoEstimator:
    """SRTT/RTTVAR/RTO of RFC 6298 §2 with the exponential backoff of §5.5."""

    __slots__ = ("srtt", "rttvar", "base_rto", "backoff", "rto_min", "rto_max")

    def __init__(self, rto_initial: int, rto_min: int, rto_max: int) -> None:
        self.srtt: int | None = None
        self.rttvar = 0
        self.base_rto = rto_initial  # RFC 6298 §2.1: 1 s before any measurement
        self.backoff = 0
        self.rto_min = rto_min
        self.rto_max = rto_max

    @property
    def rto(self) -> int:
        """The current timeout: base RTO doubled once per expiry, capped (RFC 6298 §5.5)."""
        return min(self.base_rto << self.backoff, self.rto_max)

    def on_sample(self, rtt: int) -> None:
        """Fold in one RTT measurement R (ns) per RFC 6298 §2.2/§2.3."""
        rtt = max(rtt, 0)
        if self.srtt is None:
            self.srtt = rtt  # §2.2: SRTT <- R, RTTVAR <- R/2
            self.rttvar = rtt // 2
        else:
            # §2.3 with alpha=1/8, beta=1/4; RTTVAR uses the old SRTT, so update it first.
            self.rttvar = (3 * self.rttvar + abs(self.srtt - rtt)) // 4
            self.srtt = (7 * self.srtt + rtt) // 8
        # Linux tcp_set_rto: RTO = SRTT + max(4 * RTTVAR, rto_min) -- the floor applies to
        # the variance term (tcp_rtt_estimator keeps rttvar_us >= tcp_rto_min_us), not to
        # the sum as RFC 6298 §2.4 puts it: a 10 ms path gets 210 ms, not 200 ms.
        rto = self.srtt + max(GRANULARITY, 4 * self.rttvar, self.rto_min)
        self.base_rto = min(rto, self.rto_max)  # §2.5
        self.backoff = 0  # a fresh sample ends the backoff (Karn's algorithm, §5)

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


__all__ = ["RtoEstimator", "retransmits_timed_out", "GRANULARITY", "SECOND"]
