"""RFC 5961 challenge ACKs and the rate limits on ACKs sent for out-of-window segments
(Linux tcp_send_challenge_ack with net.ipv4.tcp_challenge_ack_limit,
tcp_oow_rate_limited with tcp_invalid_ratelimit)."""

from __future__ import annotations

from rcunet.core.tcp.options import SECOND
from rcunet.wire import tcp


class ChallengeAckMixin:
    """``Connection``'s challenge ACKs and their limits."""

    __slots__ = ()

    def _challenge_ack(self, now: int, syn: bool = False) -> None:
        """RFC 5961 §3.2/§4.2 challenge ACK, rate limited (§7; Linux: also 500 ms per socket)."""
        if syn:
            self.counters.add("TcpExtTCPSYNChallenge")
        if self._oow_rate_limited(now, "TcpExtTCPACKSkippedChallenge"):
            return
        if self._challenge_window_at is None or now - self._challenge_window_at >= SECOND:
            self._challenge_window_at, self._challenge_count = now, 0
        if self._challenge_count >= self.options.challenge_ack_limit:
            self.counters.add("TcpExtTCPACKSkippedChallenge")
            return
        self._challenge_count += 1
        self.counters.add("TcpExtTCPChallengeACK")
        self._ack_now = True

    def _send_dupack(self, seg: tcp.Repr, now: int, skipped_counter: str) -> None:
        """ACK an unacceptable segment (RFC 9293 §3.10.7.4 first).

        Linux (tcp_oow_rate_limited) rate-limits the answer only for segments without
        data, which could otherwise start an ACK loop; data always gets its dup ACK.
        """
        if not seg.payload and self._oow_rate_limited(now, skipped_counter):
            return
        self._ack_now = True

    def _oow_rate_limited(self, now: int, counter: str) -> bool:
        last = self._last_oow_ack_at
        if last is not None and now - last < self.options.invalid_ratelimit:
            self.counters.add(counter)
            return True
        self._last_oow_ack_at = now
        return False
