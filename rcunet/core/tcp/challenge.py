"""RFC 5961 challenge ACKs and the rate limits on ACKs sent for out-of-window segments
(Linux tcp_send_challenge_ack with net.ipv4.tcp_challenge_ack_limit,
tcp_oow_rate_limited with tcp_invalid_ratelimit)."""

from __future__ import annotations

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.options import SECOND, Options
from rcunet.wire import tcp


class ChallengeAcks:
    """A connection's challenge ACKs and their limits: the only writer of the limits'
    state.  Each method answers whether an ACK goes out now; the connection sends it.
    (Like every part, it holds no reference back to its ``Connection``: the options come
    with each call, so a connection stays free of cycles and is freed by its refcount.)"""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots("counters", "window_at", "count", "last_oow_ack_at")

    def __init__(self, counters: Counters) -> None:
        self.counters = counters
        self.window_at: int | None = None  # start of the current one-second window
        self.count = 0  # challenge ACKs sent in it
        self.last_oow_ack_at: int | None = None  # the last ACK for an out-of-window segment

    def challenge(self, options: Options, now: int, syn: bool = False) -> bool:
        """RFC 5961 §3.2/§4.2 challenge ACK, rate limited (§7; Linux: also 500 ms per
        socket).  True: send it."""
        counters = self.counters
        if syn:
            counters.add("TcpExtTCPSYNChallenge")
        if self.rate_limited(options, now, "TcpExtTCPACKSkippedChallenge"):
            return False
        if self.window_at is None or now - self.window_at >= SECOND:
            self.window_at, self.count = now, 0
        if self.count >= options.challenge_ack_limit:
            counters.add("TcpExtTCPACKSkippedChallenge")
            return False
        self.count += 1
        counters.add("TcpExtTCPChallengeACK")
        return True

    def dupack(self, options: Options, seg: tcp.Repr, now: int, skipped_counter: str) -> bool:
        """ACK an unacceptable segment (RFC 9293 §3.10.7.4 first)?

        Linux (tcp_oow_rate_limited) rate-limits the answer only for segments without
        data, which could otherwise start an ACK loop; data always gets its dup ACK.
        """
        return bool(seg.payload) or not self.rate_limited(options, now, skipped_counter)

    def rate_limited(self, options: Options, now: int, counter: str) -> bool:
        """tcp_oow_rate_limited: an ACK for an out-of-window segment within
        tcp_invalid_ratelimit of the last one is skipped (and counted in ``counter``)."""
        last = self.last_oow_ack_at
        if last is not None and now - last < options.invalid_ratelimit:
            self.counters.add(counter)
            return True
        self.last_oow_ack_at = now
        return False
