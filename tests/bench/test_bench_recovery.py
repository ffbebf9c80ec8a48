"""``rcunet bench recovery``: deterministic on the virtual clock, and its figures are the
transfer's own."""

from __future__ import annotations

from rcunet.bench.recovery import transfer


def run(mode: int, **impair: object):
    return transfer(size=300_000, seed=2, tcp_recovery=mode, impair=dict(impair),
                    delay_ms=5, rate_mbps=20)


def test_same_seed_same_figures() -> None:
    assert run(1, loss=0.03) == run(1, loss=0.03)


def test_losses_are_repaired_and_counted() -> None:
    clean = run(1)
    lossy = run(1, loss=0.05)
    assert clean.delivered == lossy.delivered == 300_000
    assert clean.bytes_retrans == 0 and lossy.bytes_retrans > 0
    assert lossy.goodput_mbps < clean.goodput_mbps <= 20


def test_reordering_is_survived_without_timeouts() -> None:
    """Reordering (5% of frames 0-3 ms late) is recovered from by both detections, with
    no RTO, and RACK, which waits out its window once reordering was seen, is not the
    slower."""
    rack = run(1, reorder=0.05, reorder_delay=3_000_000)
    dupack = run(0, reorder=0.05, reorder_delay=3_000_000)
    assert rack.delivered == dupack.delivered == 300_000
    assert rack.rtos == dupack.rtos == 0
    assert rack.goodput_mbps >= dupack.goodput_mbps
