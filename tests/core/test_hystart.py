"""HyStart as Linux's CUBIC runs it (tcp_cubic.c): ACK-train and delay-increase
detection, the low-window gate, rounds, and loss resetting it."""

from __future__ import annotations

from rcunet.core.tcp import congestion
from rcunet.core.tcp.congestion import Cubic, hystart
from rcunet.core.tcp.congestion.hystart import HyStart
from rcunet.core.tcp.counters import Counters

MS = 1000  # µs


def _ack(h: HyStart, now: int, rtt: int, cwnd: int = 20, snd_una: int = 0,
         snd_nxt: int = 100_000, **kw: object) -> int | None:
    return h.on_ack(now_us=now, rtt_us=rtt, snd_una=snd_una, snd_nxt=snd_nxt, cwnd=cwnd,
                    in_slow_start=True, **kw)


def test_ack_train_longer_than_half_the_min_rtt_ends_slow_start() -> None:
    """delay_min 10 ms, unpaced: the train must last more than 5 ms."""
    h = HyStart(detect=hystart.ACK_TRAIN)
    h.reset_round(0, snd_nxt=100_000)
    found = None
    now = 0
    while found is None:
        now += 100  # ACKs 0.1 ms apart: one train
        found = _ack(h, now, rtt=10 * MS)
    assert found == 20 and now == 5 * MS + 100
    assert h.counters.values == {"TcpExtTCPHystartTrainDetect": 1,
                                 "TcpExtTCPHystartTrainCwnd": 20}
    assert _ack(h, now + 100, rtt=10 * MS) is None  # found once per slow start


def test_a_gap_between_acks_breaks_the_train() -> None:
    h = HyStart(detect=hystart.ACK_TRAIN)
    h.reset_round(0, snd_nxt=100_000)
    assert _ack(h, 100, rtt=10 * MS) is None
    assert _ack(h, 100 + 3 * MS, rtt=10 * MS) is None  # 3 ms > ack_delta: not a train
    assert _ack(h, 6 * MS, rtt=10 * MS) is None         # last_ack still at 0.1 ms


def test_paced_flow_waits_a_whole_min_rtt_plus_the_tso_cushion() -> None:
    assert hystart.ack_delay_us(0) == 0
    assert hystart.ack_delay_us(10**12) == 0  # fast: a negligible cushion
    assert hystart.ack_delay_us(125_000_000) == 1000  # 1 Gbit/s: capped at 1 ms
    assert hystart.ack_delay_us(10**9) == 262          # 8 Gbit/s: 4 * 64 KiB of it
    h = HyStart(detect=hystart.ACK_TRAIN)
    h.reset_round(0, snd_nxt=100_000)
    now, found = 0, None
    while found is None:
        now += 100
        found = _ack(h, now, rtt=10 * MS, paced=True)
    assert now == 10 * MS + 100


def test_delay_increase_after_eight_samples() -> None:
    h = HyStart(detect=hystart.DELAY)
    h.reset_round(0, snd_nxt=1000)
    assert _ack(h, 1, rtt=20 * MS, snd_nxt=1000) is None  # delay_min 20 ms: +4 ms (clamp)
    for i in range(8):  # the next round: 8 samples first, each 4 ms + 1 µs above
        assert _ack(h, 10 * MS * (i + 2), rtt=24 * MS + 1, snd_una=1001) is None
    assert _ack(h, 200 * MS, rtt=24 * MS + 1, snd_una=1001) == 20
    assert h.counters["TcpExtTCPHystartDelayDetect"] == 1
    calm = HyStart(detect=hystart.DELAY)
    calm.reset_round(0, snd_nxt=1000)
    _ack(calm, 1, rtt=20 * MS, snd_nxt=1000)
    for i in range(12):  # exactly at the threshold: not above it
        assert _ack(calm, 10 * MS * (i + 2), rtt=24 * MS, snd_una=1001) is None


def test_a_new_round_forgets_the_last_rounds_rtt() -> None:
    h = HyStart(detect=hystart.DELAY)
    h.reset_round(0, snd_nxt=1000)
    _ack(h, 1, rtt=20 * MS)
    for i in range(8):
        _ack(h, 10 * MS * (i + 2), rtt=30 * MS, snd_nxt=1000)
    # SND.UNA passed the round's end: new round, samples counted afresh
    assert _ack(h, 200 * MS, rtt=30 * MS, snd_una=1001, snd_nxt=5000) is None
    assert h.sample_cnt == 1 and h.end_seq == 5000


def test_gates() -> None:
    h = HyStart()
    h.reset_round(0, snd_nxt=100_000)
    assert _ack(h, 100, rtt=10 * MS, cwnd=15) is None  # below hystart_low_window
    assert h.delay_min == 10 * MS                     # delay_min tracked anyway
    assert h.on_ack(now_us=200, rtt_us=5 * MS, snd_una=0, snd_nxt=1, cwnd=20,
                    in_slow_start=False) is None
    assert h.delay_min == 5 * MS
    assert h.on_ack(now_us=300, rtt_us=1 * MS, snd_una=0, snd_nxt=1, cwnd=20,
                    in_slow_start=True, after_recovery=True) is None
    assert h.delay_min == 5 * MS                      # discarded after recovery
    assert h.on_ack(now_us=300, rtt_us=None, snd_una=0, snd_nxt=1, cwnd=20,
                    in_slow_start=True) is None
    h.found = True
    h.on_loss(1000, snd_nxt=7)
    assert (h.found, h.delay_min, h.round_start, h.end_seq) == (False, 0, 1000, 7)


def test_delay_threshold_clamp() -> None:
    assert hystart.delay_threshold_us(8 * MS) == 4 * MS
    assert hystart.delay_threshold_us(80 * MS) == 10 * MS
    assert hystart.delay_threshold_us(800 * MS) == 16 * MS


def test_what_hystart_finds_is_counted_in_the_counters_cubic_is_given() -> None:
    """nstat's TcpExtTCPHystart* come from the connection's counters, which the Host sums."""
    counters = Counters()
    cc = congestion.create("cubic", 1000, 10, counters=counters)
    assert isinstance(cc, Cubic)
    h = cc.hystart
    h.detect = hystart.ACK_TRAIN
    h.reset_round(0, snd_nxt=100_000)
    now, found = 0, None
    while found is None:
        now += 100
        found = _ack(h, now, rtt=10 * MS)
    assert counters["TcpExtTCPHystartTrainDetect"] == 1
    assert counters["TcpExtTCPHystartTrainCwnd"] == 20
