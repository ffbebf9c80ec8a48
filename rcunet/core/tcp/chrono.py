"""Where a sender's time goes: Linux's TCP chronographs (tcp_chrono_start/stop/set in
net/ipv4/tcp_output.c), read out by TCP_INFO as tcpi_busy_time, tcpi_rwnd_limited and
tcpi_sndbuf_limited (tcp_get_info_chrono_stats).

One chronograph runs at a time, the most interesting condition winning (the higher
number): BUSY while data waits in the send or retransmission queue, RWND_LIMITED while
the peer's window holds back data congestion control would send, SNDBUF_LIMITED while
the application waits for send-buffer space.  Stopping a condition falls back to BUSY,
or to nothing once both queues are empty.  Times are ns here; TCP_INFO reports µs.
"""

from __future__ import annotations

UNSPEC, BUSY, RWND_LIMITED, SNDBUF_LIMITED = 0, 1, 2, 3


class Chrono:
    __slots__ = ("kind", "started", "stat")

    def __init__(self) -> None:
        self.kind = UNSPEC  #: tp->chrono_type
        self.started = 0  #: tp->chrono_start
        self.stat = [0, 0, 0]  #: tp->chrono_stat: ns spent in BUSY, RWND_, SNDBUF_LIMITED

    def _set(self, kind: int, now: int) -> None:
        """tcp_chrono_set: close the running interval, open one of ``kind``."""
        if self.kind > UNSPEC:
            self.stat[self.kind - 1] += now - self.started
        self.started = now
        self.kind = kind

    def start(self, kind: int, now: int) -> None:
        """tcp_chrono_start: only a more interesting condition takes over."""
        if kind > self.kind:
            self._set(kind, now)

    def stop(self, kind: int, now: int, queues_empty: bool) -> None:
        """tcp_chrono_stop: nothing left to send stops every chronograph; otherwise the
        running one, if it is ``kind``, falls back to BUSY."""
        if queues_empty:
            if self.kind != UNSPEC:
                self._set(UNSPEC, now)
        elif kind == self.kind:
            self._set(BUSY, now)

    def totals(self, now: int) -> tuple[int, int, int]:
        """(busy, rwnd_limited, sndbuf_limited) in ns up to ``now``; busy is their sum,
        as tcpi_busy_time is."""
        stat = list(self.stat)
        if self.kind > UNSPEC:
            stat[self.kind - 1] += now - self.started
        return sum(stat), stat[1], stat[2]


__all__ = ["BUSY", "RWND_LIMITED", "SNDBUF_LIMITED", "UNSPEC", "Chrono"]
