"""CUBIC (RFC 9438), window in segments as floats, time from the caller's ``now``.

Slow start ends early by HyStart as Linux's tcp_cubic has it (hystart=1,
hystart_detect=3: ACK train and delay increase; ``hystart.py``), fast convergence on
(§4.7), the Reno-friendly region of §4.3 with alpha_cubic switching to 1 once W_est
reaches W_max.
"""

from __future__ import annotations

import math

from rcunet.core.tcp.congestion.base import CongestionControl
from rcunet.core.tcp.congestion.hystart import HyStart

C = 0.4  #: RFC 9438 §4.1.1 (constants of interest)
BETA = 0.7  #: RFC 9438 §4.1.1 beta_cubic (applied in §4.6)
ALPHA = 3 * (1 - BETA) / (1 + BETA)  #: RFC 9438 §4.3 alpha_cubic
NS = 1e9


class Cubic(CongestionControl):
    name = "cubic"

    def __init__(self, mss: int, initial_cwnd: int) -> None:
        super().__init__(mss, initial_cwnd)
        self.w_max = 0.0  #: segments, window before the last reduction
        self.k = 0.0  #: seconds, time to climb back to w_max (eq. 2)
        self.epoch_at: int | None = None  #: start of the current CA epoch (t_epoch)
        self.cwnd_epoch = 0.0
        self.w_est = 0.0  #: Reno-friendly estimate (§4.3)
        self._seg = float(self.cwnd) / mss  # cwnd in segments, fractional
        self.hystart = HyStart()
        self._round_started = False  # bictcp_hystart_reset has run (cubictcp_init)

    def _sync(self) -> None:
        self.cwnd = max(int(self._seg * self.mss), self.mss)

    def set_cwnd(self, cwnd: int) -> None:
        self.cwnd = cwnd
        self._seg = cwnd / self.mss

    def set_mss(self, mss: int) -> None:
        super().set_mss(mss)
        self._seg = self.cwnd / mss

    def w_cubic(self, t: float) -> float:
        """RFC 9438 eq. 1: W_cubic(t) = C * (t - K)^3 + W_max (segments)."""
        return C * (t - self.k) ** 3 + self.w_max

    def on_ack(self, acked: int, now: int, srtt: int | None) -> None:
        segs = acked / self.mss
        if self.in_slow_start:
            # Linux tcp_slow_start: every delivered segment counts (cwnd += acked, up to
            # ssthresh), not one segment per ACK.
            self._seg = min(self._seg + segs, max(self._seg, self.ssthresh / self.mss))
            self._sync()
            return
        if self.epoch_at is None:  # §4.2: first ACK of a new congestion-avoidance epoch
            self.epoch_at = now
            self.cwnd_epoch = self._seg
            self.w_est = self._seg
            if self.w_max < self._seg:
                self.w_max = self._seg
            self.k = math.cbrt((self.w_max - self.cwnd_epoch) / C)
        t = (now - self.epoch_at) / NS
        rtt = (srtt or 0) / NS
        alpha = 1.0 if self.w_est >= self.w_max else ALPHA
        self.w_est += alpha * segs / self._seg  # §4.3 eq. 4
        if self.w_cubic(t) < self.w_est:
            self._seg = max(self._seg, self.w_est)  # Reno-friendly region (§4.3)
        else:
            # §4.2: target = W_cubic(t + RTT) clamped to [cwnd, 1.5 cwnd]
            target = min(max(self.w_cubic(t + rtt), self._seg), 1.5 * self._seg)
            self._seg += (target - self._seg) / self._seg * segs
        self._sync()

    def on_rtt(self, rtt_us: int | None, now: int, snd_una: int, snd_nxt: int) -> None:
        """cubictcp_acked: HyStart on every RTT sample; when it finds slow start's end,
        ssthresh becomes the current cwnd (hystart_update).  Delay samples within a
        second of a congestion epoch's start are not taken."""
        now_us = now // 1000
        hystart = self.hystart
        if not self._round_started:
            hystart.reset_round(now_us, snd_nxt)
            self._round_started = True
        after_recovery = self.epoch_at is not None and now - self.epoch_at < NS
        found = hystart.on_ack(now_us=now_us, rtt_us=rtt_us, snd_una=snd_una,
                               snd_nxt=snd_nxt, cwnd=self.cwnd // self.mss,
                               in_slow_start=self.in_slow_start,
                               after_recovery=after_recovery)
        if found is not None and self.in_slow_start:
            self.ssthresh = self.cwnd

    def on_timeout(self, now: int, flight: int) -> None:
        """An RTO (cubictcp_state TCP_CA_Loss): HyStart starts over."""
        super().on_timeout(now, flight)
        self.hystart.on_loss(now // 1000, 0)
        self._round_started = False

    def on_congestion(self, now: int, flight: int) -> None:
        cwnd_seg = self.cwnd / self.mss
        # §4.7 fast convergence: release bandwidth when W_max keeps shrinking.
        if cwnd_seg < self.w_max:
            self.w_max = cwnd_seg * (1 + BETA) / 2
        else:
            self.w_max = cwnd_seg
        # §4.6: ssthresh = cwnd * beta_cubic, at least 2 segments (RFC 5681 floor).
        self.ssthresh = max(int(self.cwnd * BETA), 2 * self.mss)
        self.epoch_at = None

    # on_recovery_exit: the base's.
