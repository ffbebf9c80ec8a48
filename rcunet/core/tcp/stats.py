"""Per-connection traffic totals that TCP_INFO reports, counted where Linux counts them:
segments and data segments each way (tcp_segs_in, __tcp_transmit_skb), payload bytes sent
(tp->bytes_sent, retransmissions included) and acknowledged (tcp_snd_una_update), and
when data last went out (tcp_event_data_sent's lsndtime).  The receiver counts what it
takes in order and out of order (``Receiver.bytes_received``, ``rcv_ooopack``).  Pure;
64-bit totals as Python ints, TCP_INFO cuts them to its field widths.
"""

from __future__ import annotations

from rcunet.core.freethreaded import lockfree_read_slots


class TrafficStats:
    """Written by the connection's engine under the socket lock; read by TCP_INFO under
    the same lock."""

    __slots__ = lockfree_read_slots(
        "segs_in", "data_segs_in", "segs_out", "data_segs_out", "bytes_sent",
        "bytes_acked", "last_data_sent_at")

    def __init__(self) -> None:
        self.segs_in = 0
        self.data_segs_in = 0
        self.segs_out = 0
        self.data_segs_out = 0
        self.bytes_sent = 0
        self.bytes_acked = 0
        self.last_data_sent_at: int | None = None  # ns

    def segment_in(self, payload: int) -> None:
        """tcp_segs_in: a segment reached the connection (its checksum was good)."""
        self.segs_in += 1
        if payload:
            self.data_segs_in += 1

    def segment_out(self, payload: int, now: int) -> None:
        """__tcp_transmit_skb: a segment left; one with data also counts as data and
        stamps lsndtime (tcp_event_data_sent)."""
        self.segs_out += 1
        if payload:
            self.data_segs_out += 1
            self.bytes_sent += payload
            self.last_data_sent_at = now
