"""CUBIC as Linux's tcp_cubic runs it: the window in whole segments with a counter of
ACKed segments toward the next increase (snd_cwnd_cnt), the cubic function in integer
arithmetic on a 1/1024 s clock (bictcp_update, cubic_root), the Reno-friendly region,
fast convergence, HyStart (``hystart.py``) and the idle shift of the epoch
(cubictcp_cwnd_event).  Time comes in as ``now`` (ns); Linux's jiffies are ms (HZ=1000).

The connection keeps cwnd and ssthresh in bytes; here they are whole segments times the
MSS, as Linux counts packets.  A cwnd that loss recovery sets between two multiples of
the MSS is kept as set and counts as its whole segments.
"""

from __future__ import annotations

from rcunet.core.tcp.congestion.base import INITIAL_SSTHRESH, CongestionControl
from rcunet.core.tcp.congestion.cubic_params import BETA_SCALE, DEFAULT_PARAMS, CubicParams
from rcunet.core.tcp.congestion.hystart import HyStart
from rcunet.core.tcp.counters import Counters

HZ = 1000  #: jiffies per second
#: BICTCP_HZ: the cubic function's clock ticks 2^10 times a second.
BICTCP_HZ = 10
U32 = 0xFFFFFFFF
NS_PER_JIFFY = 1_000_000


def _module_constants(params: CubicParams) -> tuple[int, int, int]:
    """cubictcp_register's precomputed factors (from the values at module load):
    beta_scale (Reno-friendly slope), cube_rtt_scale (C/rtt, /1024) and cube_factor
    (2^40 / (C * 10): K from W_max - cwnd at the 100 ms reference RTT)."""
    beta_scale = 8 * (BETA_SCALE + params.beta) // 3 // (BETA_SCALE - params.beta)
    return beta_scale, params.bic_scale * 10, (1 << (10 + 3 * BICTCP_HZ)) // (params.bic_scale * 10)


BETA_SCALE_FACTOR, CUBE_RTT_SCALE, CUBE_FACTOR = _module_constants(DEFAULT_PARAMS)

#: cubic_root's table: cbrt(x << 18) - 1 for x in [0, 63], refined by hand (Linux).
_CBRT_TABLE = (
    0, 54, 54, 54, 118, 118, 118, 118,
    123, 129, 134, 138, 143, 147, 151, 156,
    157, 161, 164, 168, 170, 173, 176, 179,
    181, 185, 187, 190, 192, 194, 197, 199,
    200, 202, 204, 206, 209, 211, 213, 215,
    217, 219, 221, 222, 224, 225, 227, 229,
    231, 232, 234, 236, 237, 239, 240, 242,
    244, 245, 246, 248, 250, 251, 252, 254,
)


def cubic_root(a: int) -> int:
    """Linux cubic_root: the cube root of a 64-bit ``a`` from a table lookup and one
    Newton-Raphson step (average error 0.195%), bit for bit as the kernel computes it."""
    b = a.bit_length()  # fls64
    if b < 7:
        return (_CBRT_TABLE[a] + 35) >> 6
    b = ((b * 84) >> 8) - 1
    shift = a >> (b * 3)
    x = (((_CBRT_TABLE[shift] + 10) << b) & U32) >> 6
    x = (2 * x + (a // (x * (x - 1)) & U32)) & U32
    return ((x * 341) & U32) >> 10


def usecs_to_jiffies(us: int) -> int:
    return -(-us // 1000)


class Cubic(CongestionControl):
    name = "cubic"

    def __init__(self, mss: int, initial_cwnd: int, params: CubicParams = DEFAULT_PARAMS,
                 counters: Counters | None = None) -> None:
        """``counters``: the connection's, where HyStart counts what it finds."""
        super().__init__(mss, initial_cwnd)
        self.params = params
        self.cwnd_cnt = 0  #: snd_cwnd_cnt: ACKed segments toward the next increase
        # struct bictcp (bictcp_reset)
        self.cnt = 0  #: increase cwnd by 1 after this many ACKed segments
        self.last_max_cwnd = 0  #: segments before the last reduction (W_max)
        self.last_cwnd = 0
        self.last_time = 0  #: jiffies of the last recalculation
        self.origin_point = 0  #: segments: bic_origin_point
        self.bic_k = 0  #: 1/1024 s from the epoch's start to the origin point
        self.epoch_start: int | None = None  #: jiffies; None: no epoch (Linux's 0)
        self.ack_cnt = 0  #: segments ACKed in the epoch, for the Reno estimate
        self.tcp_cwnd = 0  #: the Reno-friendly estimate (segments)
        self.hystart = HyStart(detect=params.hystart_detect,
                               low_window=params.hystart_low_window,
                               ack_delta_us=params.hystart_ack_delta_us,
                               counters=counters)
        self._round_started = False  # bictcp_hystart_reset has run (cubictcp_init)
        if not params.hystart and params.initial_ssthresh:
            self.ssthresh = params.initial_ssthresh * mss

    # -- the window in segments ----------------------------------------------------

    @property
    def snd_cwnd(self) -> int:
        """tcp_snd_cwnd: cwnd in whole segments."""
        return max(self.cwnd // self.mss, 1)

    def _set_snd_cwnd(self, pkts: int) -> None:
        self.cwnd = pkts * self.mss

    def _ssthresh_pkts(self) -> int:
        if self.ssthresh >= INITIAL_SSTHRESH:
            return INITIAL_SSTHRESH  # TCP_INFINITE_SSTHRESH: no bound
        return self.ssthresh // self.mss

    # -- growth ---------------------------------------------------------------------

    def on_ack(self, acked: int, now: int, srtt: int | None) -> None:
        """cubictcp_cong_avoid for ``acked`` bytes delivered (Linux counts segments;
        a partial segment counts as one).  The caller has checked
        tcp_is_cwnd_limited."""
        pkts = -(-acked // self.mss)
        if pkts <= 0:
            return
        if self.in_slow_start:
            pkts = self._slow_start(pkts)
            if not pkts:
                return
        self._update(self.snd_cwnd, pkts, now // NS_PER_JIFFY)
        self._cong_avoid_ai(self.cnt, pkts)

    def _slow_start(self, acked: int) -> int:
        """tcp_slow_start: cwnd grows by the ACKed segments up to ssthresh; what is
        left over goes to congestion avoidance."""
        cwnd = self.snd_cwnd
        grown = min(cwnd + acked, self._ssthresh_pkts())
        if grown > cwnd:
            self._set_snd_cwnd(grown)
            return acked - (grown - cwnd)
        return acked

    def _cong_avoid_ai(self, w: int, acked: int) -> None:
        """tcp_cong_avoid_ai: one segment more for every ``w`` ACKed."""
        cwnd = self.snd_cwnd
        if self.cwnd_cnt >= w:  # credits accumulated at a higher w: apply them gently
            self.cwnd_cnt = 0
            cwnd += 1
        self.cwnd_cnt += acked
        if self.cwnd_cnt >= w:
            delta = self.cwnd_cnt // w
            self.cwnd_cnt -= delta * w
            cwnd += delta
        if cwnd != self.snd_cwnd:
            self._set_snd_cwnd(cwnd)

    def _update(self, cwnd: int, acked: int, jiffies: int) -> None:
        """bictcp_update: ``cnt``, the segments to ACK per one more of cwnd."""
        self.ack_cnt += acked
        if self.last_cwnd == cwnd and jiffies - self.last_time <= HZ // 32:
            return
        # ca->cnt changes at most once a jiffy; a reduction ends the epoch and forces it
        if not (self.epoch_start is not None and jiffies == self.last_time):
            self._recalc_cnt(cwnd, acked, jiffies)
        self._friendliness(cwnd)
        # at most one segment per two ACKed: cwnd grows 1.5 times a round trip at most
        self.cnt = max(self.cnt, 2)

    def _recalc_cnt(self, cwnd: int, acked: int, jiffies: int) -> None:
        """bictcp_update's cubic function: W(t + delay_min) against cwnd."""
        self.last_cwnd = cwnd
        self.last_time = jiffies
        if self.epoch_start is None:
            self.epoch_start = jiffies
            self.ack_cnt = acked
            self.tcp_cwnd = cwnd
            if self.last_max_cwnd <= cwnd:
                self.bic_k = 0
                self.origin_point = cwnd
            else:
                self.bic_k = cubic_root(CUBE_FACTOR * (self.last_max_cwnd - cwnd))
                self.origin_point = self.last_max_cwnd
        t = jiffies - self.epoch_start + usecs_to_jiffies(self.hystart.delay_min)
        t = (t << BICTCP_HZ) // HZ
        offs = self.bic_k - t if t < self.bic_k else t - self.bic_k
        delta = ((CUBE_RTT_SCALE * offs * offs * offs) >> (10 + 3 * BICTCP_HZ)) & U32
        if t < self.bic_k:
            target = (self.origin_point - delta) & U32  # below the origin
        else:
            target = (self.origin_point + delta) & U32  # above it
        if target > cwnd:
            self.cnt = cwnd // (target - cwnd)
        else:
            self.cnt = 100 * cwnd  # a very small increment
        if self.last_max_cwnd == 0 and self.cnt > 20:
            self.cnt = 20  # bandwidth still unknown: 5% a round trip at least

    def _friendliness(self, cwnd: int) -> None:
        """bictcp_update's TCP-friendly region: never slower than Reno's estimate."""
        if not self.params.tcp_friendliness:
            return
        delta = (cwnd * BETA_SCALE_FACTOR) >> 3
        if delta and self.ack_cnt > delta:
            steps = (self.ack_cnt - 1) // delta  # the kernel's while loop, at once
            self.ack_cnt -= steps * delta
            self.tcp_cwnd += steps
        if self.tcp_cwnd > cwnd:
            max_cnt = cwnd // (self.tcp_cwnd - cwnd)
            if self.cnt > max_cnt:
                self.cnt = max_cnt

    # -- HyStart and events -------------------------------------------------------------

    def on_rtt(self, rtt_us: int | None, now: int, snd_una: int, snd_nxt: int) -> None:
        """cubictcp_acked: every ACK's RTT sample keeps delay_min and feeds HyStart,
        which may end slow start with ssthresh at the current cwnd (hystart_update).
        Delay samples within a second of an epoch's start are not taken."""
        now_us = now // 1000
        hystart = self.hystart
        if self.params.hystart and not self._round_started:
            hystart.reset_round(now_us, snd_nxt)
            self._round_started = True
        epoch = self.epoch_start
        after_recovery = epoch is not None and now // NS_PER_JIFFY - epoch < HZ
        found = hystart.on_ack(now_us=now_us, rtt_us=rtt_us, snd_una=snd_una,
                               snd_nxt=snd_nxt, cwnd=self.snd_cwnd,
                               in_slow_start=self.in_slow_start and bool(self.params.hystart),
                               after_recovery=after_recovery)
        if found is not None and self.in_slow_start:
            self.ssthresh = self.snd_cwnd * self.mss

    def on_tx_start(self, now: int, last_data_sent_at: int | None) -> None:
        """cubictcp_cwnd_event(CA_EVENT_TX_START): data goes out with nothing in
        flight.  The idle time since the last data does not count toward the cubic
        curve: the epoch's start moves forward by it (at most to now)."""
        if self.epoch_start is None or last_data_sent_at is None:
            return
        jiffies = now // NS_PER_JIFFY
        delta = jiffies - last_data_sent_at // NS_PER_JIFFY
        if delta > 0:
            self.epoch_start = min(self.epoch_start + delta, jiffies)

    def on_congestion(self, now: int, flight: int) -> None:
        """cubictcp_recalc_ssthresh: the epoch ends; W_max is cwnd, or less with fast
        convergence when cwnd did not reach the last one; ssthresh = cwnd * beta."""
        cwnd = self.snd_cwnd
        beta = self.params.beta
        self.epoch_start = None
        if cwnd < self.last_max_cwnd and self.params.fast_convergence:
            self.last_max_cwnd = cwnd * (BETA_SCALE + beta) // (2 * BETA_SCALE)
        else:
            self.last_max_cwnd = cwnd
        self.ssthresh = max(cwnd * beta // BETA_SCALE, 2) * self.mss
        self.cwnd_cnt = 0  # tcp_init_cwnd_reduction

    def on_timeout(self, now: int, flight: int) -> None:
        """An RTO: tcp_enter_loss asks for ssthresh, then cubictcp_state(TCP_CA_Loss)
        resets CUBIC (bictcp_reset) and HyStart starts a new round."""
        super().on_timeout(now, flight)
        self._reset()
        self.hystart.on_loss(now // 1000, 0)
        self._round_started = False

    def _reset(self) -> None:
        """bictcp_reset."""
        self.cnt = self.last_max_cwnd = self.last_cwnd = self.last_time = 0
        self.origin_point = self.bic_k = self.ack_cnt = self.tcp_cwnd = 0
        self.epoch_start = None
        self.cwnd_cnt = 0  # tcp_enter_loss

    # set_cwnd, on_recovery_exit: the base's.
