"""The connection's deadlines (no clock here: the host's timer wheel fires ``on_timer``).

One slot per RFC timer; ``None`` means stopped.  The retransmission and persist timers
never run together (RFC 9293 §3.8.6.1: probing only happens with nothing in flight).
"""

from __future__ import annotations

from dataclasses import dataclass

NAMES = ("rto_at", "delack_at", "persist_at", "keepalive_at", "time_wait_at", "fin_wait2_at")


@dataclass(slots=True)
class Timers:
    rto_at: int | None = None  #: retransmission (RFC 6298 §5), also SYN and SYN,ACK
    delack_at: int | None = None  #: delayed ACK (RFC 1122 §4.2.3.2, RFC 5681 §4.2)
    persist_at: int | None = None  #: zero-window probe (RFC 9293 §3.8.6.1)
    keepalive_at: int | None = None  #: keep-alive (RFC 1122 §4.2.3.6)
    time_wait_at: int | None = None  #: 2MSL (RFC 9293 §3.10.7.4)
    fin_wait2_at: int | None = None  #: orphaned FIN-WAIT-2 (Linux tcp_fin_timeout)

    def next_at(self) -> int | None:
        """The earliest armed deadline, or None when no timer runs."""
        earliest = None  # one pass, no list: the host asks after every engine call
        for at in (self.rto_at, self.delack_at, self.persist_at, self.keepalive_at,
                   self.time_wait_at, self.fin_wait2_at):
            if at is not None and (earliest is None or at < earliest):
                earliest = at
        return earliest

    def stop_all(self) -> None:
        for name in NAMES:
            setattr(self, name, None)
