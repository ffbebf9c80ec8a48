"""CUBIC as Linux's tcp_cubic computes it: integer segments, bictcp_update's cubic
function and Reno-friendly region, the idle shift of the epoch, and the module
parameters (cubic_params)."""

from __future__ import annotations

import math
import pickle

import pytest

from rcunet.core.tcp.congestion import create
from rcunet.core.tcp.congestion.base import INITIAL_SSTHRESH
from rcunet.core.tcp.congestion.cubic import Cubic, cubic_root
from rcunet.core.tcp.congestion.cubic_params import ACK_TRAIN, DEFAULT_PARAMS, DELAY, CubicParams

MSS = 1000
MS = 1_000_000
SECOND = 1000 * MS


@pytest.mark.parametrize("a", [1, 2, 7, 63, 64, 1000, 27_000_000, 2**40 // 410 * 30,
                               2**50 + 12345, 2**63 - 1])
def test_cubic_root_is_within_a_percent_of_the_real_one(a: int) -> None:
    assert math.isclose(cubic_root(a), round(a ** (1 / 3)), rel_tol=0.01, abs_tol=1)


def _in_avoidance(cwnd: int, params: CubicParams = DEFAULT_PARAMS) -> Cubic:
    cc = Cubic(MSS, 10, params)
    cc.set_cwnd(cwnd * MSS)
    cc.ssthresh = cwnd * MSS  # slow start over, no loss yet
    return cc


def _ack_pairs(cc: Cubic, start: int, count: int, step: int = 100 * MS) -> int:
    """``count`` ACKs of two segments each, ``step`` apart; the time after the last."""
    now, first = start, cc.snd_cwnd
    for _ in range(count):
        cc.on_ack(2 * MSS, now, 100 * MS)
        now += step
    # at most one segment per two ACKed (tcp_cong_avoid_ai may spend one credit left
    # from before at once)
    assert cc.snd_cwnd - first <= count + 1
    return now


def test_growth_never_passes_one_segment_per_two_acked() -> None:
    """bictcp_update's floor of cnt = 2: however far the cubic target runs ahead
    (seconds into the epoch, no W_max to stop at), cwnd grows by at most half of what
    is ACKed."""
    cc = _in_avoidance(50)
    now = _ack_pairs(cc, SECOND, 100)
    for _ in range(30):
        now = _ack_pairs(cc, now, 10)
    assert cc.snd_cwnd > 100  # the convex region took it well past its start


def test_idle_time_does_not_count_toward_the_cubic_curve() -> None:
    """cubictcp_cwnd_event(CA_EVENT_TX_START): after four idle seconds the epoch's start
    moves forward by them, so the window grows as if the idle time had not happened;
    without the event the curve would credit the idle seconds at once."""
    shifted, credited, never_idle = (_in_avoidance(50) for _ in range(3))
    for cc in (shifted, credited, never_idle):
        _ack_pairs(cc, SECOND, 10)
    last_sent = 2 * SECOND - 100 * MS
    shifted.on_tx_start(6 * SECOND, last_sent)
    _ack_pairs(shifted, 6 * SECOND, 10)
    _ack_pairs(credited, 6 * SECOND, 10)
    _ack_pairs(never_idle, 2 * SECOND, 10)
    assert shifted.snd_cwnd == never_idle.snd_cwnd < credited.snd_cwnd


def test_reduction_sets_w_max_and_ssthresh_with_the_module_beta() -> None:
    cc = _in_avoidance(100, CubicParams(beta=512, fast_convergence=0))
    cc.on_congestion(SECOND, 100 * MSS)
    assert (cc.ssthresh, cc.last_max_cwnd) == (50 * MSS, 100)
    cc.set_cwnd(80 * MSS)
    cc.on_congestion(2 * SECOND, 80 * MSS)
    assert cc.last_max_cwnd == 80  # fast convergence off: W_max is cwnd


def test_timeout_resets_cubic_and_hystart() -> None:
    """tcp_enter_loss: ssthresh from cwnd, then cubictcp_state(TCP_CA_Loss) clears the
    epoch, W_max and delay_min (bictcp_reset)."""
    cc = _in_avoidance(40)
    cc.on_rtt(50_000, SECOND, 0, 40 * MSS)
    _ack_pairs(cc, SECOND, 3)
    cc.on_timeout(2 * SECOND, 40 * MSS)
    assert (cc.cwnd, cc.ssthresh) == (MSS, 40 * 717 // 1024 * MSS)
    assert (cc.last_max_cwnd, cc.epoch_start, cc.hystart.delay_min) == (0, None, 0)


def _slow_start_with_rising_rtt(params: CubicParams) -> Cubic:
    """Slow start at 20 segments: one round with a 100 ms RTT, then a round whose ACKs,
    10 ms apart, all take 120 ms or more: a queue building."""
    cc = create("cubic", MSS, 20, params)
    assert isinstance(cc, Cubic)
    cc.on_rtt(100_000, SECOND, 0, 20 * MSS)  # the round ends at 20 segments
    for i in range(12):
        cc.on_rtt(120_000 + 1000 * i, SECOND + 10 * (i + 1) * MS, (21 + i) * MSS, 60 * MSS)
        if not cc.in_slow_start:
            break
        cc.on_ack(MSS, SECOND + 10 * (i + 1) * MS, 100 * MS)
    return cc


@pytest.mark.parametrize(("params", "ends"), [
    (CubicParams(), True),
    (CubicParams(hystart_detect=DELAY), True),
    (CubicParams(hystart_detect=ACK_TRAIN), False),  # ACKs 10 ms apart are no train
    (CubicParams(hystart=0), False),
    (CubicParams(hystart_low_window=64), False),
])
def test_hystart_follows_the_module_parameters(params: CubicParams, ends: bool) -> None:
    cc = _slow_start_with_rising_rtt(params)
    assert (not cc.in_slow_start) is ends
    if ends:
        assert cc.ssthresh == cc.cwnd  # hystart_update: ssthresh = cwnd


def test_initial_ssthresh_applies_only_without_hystart() -> None:
    """cubictcp_init: initial_ssthresh is the new connection's ssthresh when HyStart is
    off; with HyStart on, slow start has no bound until HyStart finds one."""
    assert create("cubic", MSS, 10, CubicParams(initial_ssthresh=30)).ssthresh == INITIAL_SSTHRESH
    assert create("cubic", MSS, 10,
                  CubicParams(initial_ssthresh=30, hystart=0)).ssthresh == 30 * MSS


def test_params_survive_pickling_to_a_host_process() -> None:
    params = CubicParams(8, 512, 7, 42, 0, 0, 2, 15, 1999)  # every field changed
    assert pickle.loads(pickle.dumps(params)) == params
