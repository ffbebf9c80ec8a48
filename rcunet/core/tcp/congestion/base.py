"""What the connection asks of a congestion controller.

The connection owns loss detection and recovery (RFC 6582 / RFC 6675 bookkeeping,
``rcunet.core.tcp.recovery``); the controller owns ``cwnd`` and ``ssthresh`` (bytes) and
how they grow and shrink.  Whatever sets cwnd from outside (a recovery algorithm's
inflation and deflation) calls ``set_cwnd``, so a controller that keeps its own form of
the window (CUBIC's fractional segments) stays in step.
"""

from __future__ import annotations

#: ssthresh before any loss, in bytes (RFC 5681 §3.1: "arbitrarily high"); TCP_INFO
#: shows it as Linux's TCP_INFINITE_SSTHRESH.
INITIAL_SSTHRESH = 1 << 30


class CongestionControl:
    name = "base"

    def __init__(self, mss: int, initial_cwnd: int) -> None:
        self.mss = mss
        self.cwnd = initial_cwnd * mss  # RFC 5681 §3.1 IW (RFC 6928: 10 segments)
        self.ssthresh = INITIAL_SSTHRESH  # RFC 5681 §3.1: "arbitrarily high"

    @property
    def in_slow_start(self) -> bool:
        return self.cwnd < self.ssthresh

    def set_mss(self, mss: int) -> None:
        self.mss = mss

    def set_cwnd(self, cwnd: int) -> None:
        """cwnd as loss recovery sets it (RFC 5681 §3.2, RFC 6582, RFC 6675 §5)."""
        self.cwnd = cwnd

    def set_loss_window(self) -> None:
        """RFC 5681 §3.1: a lost SYN leaves IW at one segment."""
        self.set_cwnd(self.mss)

    def on_ack(self, acked: int, now: int, srtt: int | None) -> None:
        """``acked`` bytes newly acknowledged outside loss recovery."""
        raise NotImplementedError

    def on_rtt(self, rtt_us: int | None, now: int, snd_una: int, snd_nxt: int) -> None:
        """Every ACK's RTT sample (µs; None without one), what Linux's pkts_acked hook
        sees: CUBIC's HyStart watches it to end slow start."""

    def on_tx_start(self, now: int, last_data_sent_at: int | None) -> None:
        """Data goes out with nothing in flight (Linux's CA_EVENT_TX_START, from
        tcp_event_data_sent); ``last_data_sent_at`` is when data last went out."""

    def on_congestion(self, now: int, flight: int) -> None:
        """Loss detected by dupacks/SACK: set ssthresh (the connection then sets cwnd)."""
        raise NotImplementedError

    def on_timeout(self, now: int, flight: int) -> None:
        """Retransmission timeout (RFC 5681 §3.1 eq. 4 then LW = 1 segment)."""
        self.on_congestion(now, flight)
        self.set_cwnd(self.mss)

    def on_recovery_exit(self, now: int) -> None:
        """Fast recovery ended: RFC 5681 §3.2 step 6 deflates cwnd to ssthresh."""
        self.set_cwnd(max(self.ssthresh, self.mss))
