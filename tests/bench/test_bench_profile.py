"""``rcunet bench profile``: its counts repeat, so two trees (or builds) compare."""

from __future__ import annotations

import argparse

from rcunet.bench import profile


def test_transaction_sends_the_same_packets_each_time():
    pair = profile.Pair.open()
    try:
        pair.run(3)  # warm-up: ARP resolved, caches filled
        counts = []
        for _ in range(3):
            before = pair.packets()
            pair.run(1)
            counts.append(pair.packets() - before)
    finally:
        pair.close()
    # SYN, SYN-ACK, ACK, request, its ACK, response, its ACK, RST
    assert counts == [8, 8, 8]


def test_calls_per_transaction_repeat():
    """Within 1%: periodic work (timer ticks, the port search's offsets) varies a little
    from one batch of transactions to the next; a tree's change shows well above that."""
    pair = profile.Pair.open()
    try:
        pair.run(5)
        first = profile.call_counts(profile.profile(pair, 20))
        second = profile.call_counts(profile.profile(pair, 20))
    finally:
        pair.close()
    for a, b in zip(first, second, strict=True):
        assert abs(a - b) <= a / 100
    assert first[0] > 0 and first[1] > 0


def test_report_lines(capsys):
    parser = argparse.ArgumentParser()
    profile.configure(parser)
    args = parser.parse_args(["-n", "10", "-r", "1", "--warmup", "2", "--top", "3"])
    assert profile.run(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("tcp_crr on the virtual clock, ")
    keys = dict(line.split("=", 1) for line in out[1:7] if "=" in line and " " not in line)
    assert keys["packets_per_transaction"] == "8.0"
    assert float(keys["cpu_us_per_transaction"]) > 0
    assert int(keys["python_calls_per_transaction"]) > 0
    assert len([line for line in out if line.startswith("  ")]) == 3
