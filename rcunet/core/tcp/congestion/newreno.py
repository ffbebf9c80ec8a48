"""Reno congestion control (RFC 5681); the NewReno recovery bookkeeping of RFC 6582 lives
in the connection, which calls ``on_congestion``/``on_recovery_exit`` here."""

from __future__ import annotations

from rcunet.core.tcp.congestion.base import CongestionControl


class NewReno(CongestionControl):
    name = "reno"

    def __init__(self, mss: int, initial_cwnd: int) -> None:
        super().__init__(mss, initial_cwnd)
        self._bytes_acked = 0  # RFC 5681 §3.1 appropriate byte counting in CA

    def on_ack(self, acked: int, now: int, srtt: int | None) -> None:
        if self.in_slow_start:
            # Linux tcp_slow_start: every delivered segment counts (cwnd += acked, up to
            # ssthresh), not RFC 5681 §3.1's min(N, SMSS) per ACK.
            self.cwnd = min(self.cwnd + acked, max(self.cwnd, self.ssthresh))
            return
        # Congestion avoidance: one SMSS per cwnd of bytes acknowledged (RFC 5681 §3.1).
        self._bytes_acked += acked
        if self._bytes_acked >= self.cwnd:
            self._bytes_acked -= self.cwnd
            self.cwnd += self.mss

    def on_congestion(self, now: int, flight: int) -> None:
        # RFC 5681 §3.1 eq. 4: ssthresh = max(FlightSize / 2, 2*SMSS)
        self.ssthresh = max(flight // 2, 2 * self.mss)
        self._bytes_acked = 0
