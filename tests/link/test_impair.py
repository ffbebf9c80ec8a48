"""Impairments: reproducible by seed, each rate right within tolerance on 10k frames,
delay/jitter/reorder timing, token-bucket rate limiting, bounded holding."""

from __future__ import annotations

import math

import pytest

from rcunet.link.impair import MS, Impairment, ImpairmentConfig

N = 10_000


def frames(n: int = N, size: int = 100) -> list[bytes]:
    return [i.to_bytes(4, "big") + bytes(size - 4) for i in range(n)]


def run(imp: Impairment, sent: list[bytes], gap: int = 0) -> list[tuple[int, bytes]]:
    """Submit ``sent`` one every ``gap`` ns, draining held frames; (time, frame) out."""
    out: list[tuple[int, bytes]] = []
    now = 0
    for frame in sent:
        out += [(now, f) for f in imp.release(now)]
        out += [(now, f) for f in imp.submit(frame, now)]
        now += gap
    while (deadline := imp.next_deadline()) is not None:
        out += [(deadline, f) for f in imp.release(deadline)]
    return out


def within(count: int, p: float, n: int = N, sigmas: float = 5.0) -> bool:
    expected = n * p
    return abs(count - expected) <= sigmas * math.sqrt(n * p * (1 - p))


EVERYTHING = ImpairmentConfig(loss=0.05, duplicate=0.05, corrupt=0.05, reorder=0.1,
                              delay=2 * MS, jitter=1 * MS, rate_bps=50_000_000, seed=7)


def test_same_seed_same_output_different_seed_different() -> None:
    sent = frames(3000)
    first = run(Impairment(EVERYTHING), sent, gap=20_000)
    again = run(Impairment(EVERYTHING), sent, gap=20_000)
    assert first == again
    other = run(Impairment(EVERYTHING, seed=8), sent, gap=20_000)
    assert other != first


def test_clean_config_is_inactive_and_transparent() -> None:
    imp = Impairment()
    assert not imp.active
    sent = frames(100)
    assert run(imp, sent) == [(0, f) for f in sent]


@pytest.mark.parametrize("p", [0.01, 0.1, 0.5])
def test_loss_rate(p: float) -> None:
    imp = Impairment(loss=p, seed=1)
    out = run(imp, frames())
    assert imp.counters["lost"] == N - len(out)
    assert within(imp.counters["lost"], p)


def test_duplicate_rate_and_copies_are_identical() -> None:
    imp = Impairment(duplicate=0.1, seed=2)
    out = [f for _t, f in run(imp, frames())]
    assert len(out) == N + imp.counters["duplicated"]
    assert within(imp.counters["duplicated"], 0.1)
    seen: dict[bytes, int] = {}
    for f in out:
        seen[f] = seen.get(f, 0) + 1
    assert sorted(set(seen.values())) == [1, 2]


def test_corruption_flips_exactly_one_bit_at_the_right_rate() -> None:
    imp = Impairment(corrupt=0.05, seed=3)
    sent = frames()
    out = [f for _t, f in run(imp, sent)]
    changed = 0
    for before, after in zip(sent, out, strict=True):
        diff = int.from_bytes(before, "big") ^ int.from_bytes(after, "big")
        if diff:
            changed += 1
            assert diff & (diff - 1) == 0  # a single bit
    assert changed == imp.counters["corrupted"]
    assert within(changed, 0.05)
    assert sent == frames()  # the caller's bytes are never touched


def test_reorder_rate_and_overtaking() -> None:
    imp = Impairment(reorder=0.1, reorder_delay=5 * MS, seed=4)
    sent = frames()
    out = run(imp, sent, gap=1 * MS)
    assert within(imp.counters["reordered"], 0.1)
    order = [int.from_bytes(f[:4], "big") for _t, f in out]
    assert sorted(order) == list(range(N))
    # A frame is late when some frame sent after it arrives before it.  Only held frames
    # can be late, and a held one is late unless all 4 frames behind it were held too.
    position = {frame: index for index, frame in enumerate(order)}
    late = 0
    earliest_after = N
    for frame in reversed(range(N)):
        if earliest_after < position[frame]:
            late += 1
        earliest_after = min(earliest_after, position[frame])
    assert imp.counters["reordered"] * 0.99 <= late <= imp.counters["reordered"]


def test_delay_and_jitter_bounds_and_mean() -> None:
    imp = Impairment(delay=10 * MS, jitter=2 * MS, seed=5, limit=5000)
    release_at = {}
    now = 0
    for frame in frames(2000):
        assert imp.submit(frame, now) == []
        now += 100_000
    submitted = {f: i * 100_000 for i, f in enumerate(frames(2000))}
    while (deadline := imp.next_deadline()) is not None:
        for f in imp.release(deadline):
            release_at[f] = deadline - submitted[f]
    delays = list(release_at.values())
    assert len(delays) == 2000
    assert min(delays) >= 8 * MS and max(delays) <= 12 * MS
    assert abs(sum(delays) / len(delays) - 10 * MS) < 0.2 * MS
    assert imp.counters["delayed"] == 2000


def test_rate_limit_spaces_frames_and_drops_beyond_queue() -> None:
    # 1 Mbit/s, 1250-byte frames: 10 ms each; bucket of 2 frames; queue of 5 frames.
    imp = Impairment(rate_bps=1_000_000, burst=2500, rate_queue=6250, seed=0)
    sent = frames(10, size=1250)
    due_now = []
    for frame in sent:
        due_now += imp.submit(frame, 0)
    assert len(due_now) == 2  # the burst
    assert imp.counters["rate_delayed"] == 5 and imp.counters["rate_dropped"] == 3
    times = []
    while (deadline := imp.next_deadline()) is not None:
        times += [deadline] * len(imp.release(deadline))
    assert times == [10 * MS * k for k in range(1, 6)]


def test_rate_limit_long_run_throughput() -> None:
    imp = Impairment(rate_bps=8_000_000, burst=1500, rate_queue=10**9, limit=N)  # 1 MB/s
    out = run(imp, frames(N, size=1000), gap=0)
    last = max(t for t, _f in out)
    # 10 MB at 1 MB/s: ~10 s (one bucket early)
    assert abs(last - 10 * 10**9) <= 2 * MS


def test_hold_limit_overflows() -> None:
    imp = Impairment(delay=1 * MS, limit=10)
    for frame in frames(15):
        imp.submit(frame, 0)
    assert imp.held == 10 and imp.counters["overflow"] == 5


def test_bad_config_rejected() -> None:
    with pytest.raises(ValueError):
        ImpairmentConfig(loss=1.5)
    with pytest.raises(ValueError):
        ImpairmentConfig(delay=-1)
