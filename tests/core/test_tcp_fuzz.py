"""Hostile peers (hypothesis): arbitrary segments never raise, never overflow the bounded
buffers, and never corrupt, duplicate or reorder what the application reads."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tcp_harness import (
    ISS_REMOTE,
    LOCAL_PORT,
    REMOTE_PORT,
    SECOND,
    Impairments,
    Net,
    established,
    plain_options,
    seg,
    transfer,
)

from rcunet.core.tcp import Connection, Options, State
from rcunet.wire import tcp
from rcunet.wire.seqnum import le, sub

U32 = st.integers(0, 0xFFFFFFFF)

segments = st.builds(
    tcp.Repr,
    src_port=st.just(REMOTE_PORT),
    dst_port=st.just(LOCAL_PORT),
    seq=st.one_of(U32, st.integers(ISS_REMOTE - 5, ISS_REMOTE + 70_000)),
    ack=st.one_of(U32, st.integers(10_000 - 5, 10_000 + 5_000)),
    flags=st.integers(0, 0xFF),
    window=st.integers(0, 0xFFFF),
    payload=st.binary(max_size=3000),
    mss=st.none() | st.integers(0, 0xFFFF),
    window_scale=st.none() | st.integers(0, 255),
    sack_permitted=st.booleans(),
    sack_blocks=st.lists(st.tuples(st.one_of(U32, st.integers(10_000, 60_000)),
                                   st.one_of(U32, st.integers(10_000, 60_000))),
                         max_size=4).map(tuple),
    timestamp=st.none() | st.tuples(U32, U32),
    checksum_ok=st.sampled_from([None, True, False]),
)

STATES = ["established", "fin_wait_1", "close_wait", "syn_received", "sending"]


def make(kind: str, opts: Options):
    if kind == "syn_received":
        c = Connection.accept_syn(seg(seq=ISS_REMOTE, ack=0, flags=tcp.SYN, mss=1460,
                                      sack_permitted=True, timestamp=(5, 0)),
                                  iss=10_000, now=0, options=opts)
        c.take_segments()
        return c
    c = established(opts)
    if kind == "fin_wait_1":
        c.shutdown_write(0)
    elif kind == "close_wait":
        c.on_segment(seg(flags=tcp.ACK | tcp.FIN), 0)
    elif kind == "sending":
        c.send(b"s" * 40_000, 0)
    c.take_segments()
    return c


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(kind=st.sampled_from(STATES), ts=st.booleans(), sack=st.booleans(),
       segs=st.lists(segments, max_size=25), gaps=st.lists(st.integers(0, 3 * SECOND), max_size=25))
def test_arbitrary_segments_never_raise_and_stay_bounded(kind, ts, sack, segs, gaps) -> None:
    opts = plain_options(timestamps=ts, sack=sack, rcvbuf=20_000, ofo_max_ranges=8)
    conn = make(kind, opts)
    now = 0
    for i, s in enumerate(segs):
        now += gaps[i] if i < len(gaps) else 1
        conn.on_segment(s, now)
        if conn.next_deadline() is not None and conn.next_deadline() <= now:
            conn.on_timer(now)
        for out in conn.take_segments():
            assert 0 <= out.seq <= 0xFFFFFFFF and 0 <= out.ack <= 0xFFFFFFFF
            assert 0 <= out.window <= 0xFFFF
            assert len(out.payload) <= conn.tcb.snd_mss
        conn.take_events()
        assert conn.readable + conn.receiver.ofo.buffered <= opts.rcvbuf
        assert len(conn.receiver.ofo) <= opts.ofo_max_ranges
        assert conn.unacked <= opts.sndbuf
        t = conn.tcb
        assert le(t.snd_una, t.snd_nxt) and le(t.snd_nxt, t.snd_max)
        assert all(0 <= a < b <= sub(t.snd_max, t.snd_una) for a, b in conn.scoreboard.ranges())
        assert conn.cc.cwnd >= t.snd_mss and t.rcv_wnd <= opts.rcvbuf
        if conn.readable:
            conn.recv(1 << 16, now)
    conn.on_timer(now + 1000 * SECOND)


# ---------------------------------------------------------------- injection mid-transfer
hostile = st.tuples(
    st.integers(0, 400),  # which step to inject at
    st.sampled_from(["overlap", "far_garbage", "rst_near", "syn", "ack_unsent", "old_ack"]),
    st.integers(-3000, 60_000),  # offset from the receiver's RCV.NXT
    st.integers(0, 2000),  # length
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 1000), attacks=st.lists(hostile, max_size=30))
def test_hostile_segments_never_corrupt_the_stream(seed, attacks) -> None:
    data = random.Random(seed).randbytes(120_000)
    net = Net(seed=seed, imp=Impairments(loss=0.02, reorder=0.1))
    net.run(until=60 * SECOND, stop=lambda: net.server is not None
            and net.server.state is State.ESTABLISHED and net.client.state is State.ESTABLISHED)
    c, s = net.client, net.server
    by_step: dict[int, list] = {}
    for step, kind, off, length in attacks:
        by_step.setdefault(step, []).append((kind, off, length))
    sent, got = 0, bytearray()
    rng = random.Random(seed)
    for step in range(200_000):
        for kind, off, length in by_step.get(step, []):
            sent_upto = (c.tcb.snd_max - (ISS_REMOTE + 1)) & 0xFFFFFFFF
            s.on_segment(attack(kind, off, length, s, data, rng, sent_upto), net.now)
            net.flush()
        if sent < len(data):
            sent += c.send(data[sent : sent + 16384], net.now)
            net.flush()
        if s.readable:
            got += s.recv(1 << 20, net.now)
            net.flush()
        if len(got) >= len(data) or not net.step():
            break
    assert bytes(got) == data[: len(got)]  # a prefix: nothing corrupted, duplicated, reordered
    assert s.state is State.ESTABLISHED and len(got) == len(data)


def attack(kind: str, off: int, length: int, victim, data: bytes, rng,
           sent_upto: int) -> tcp.Repr:
    """A hostile segment.  ``sent_upto`` is the stream offset the real sender has reached
    (its SND.MAX): a forged copy of true bytes beyond it would make the receiver ACK data
    the sender never sent, an ACK RFC 9293 tells the sender to drop — no TCP can make
    progress after that, so "overlap" replays only bytes already sent."""
    t = victim.tcb
    base = (t.rcv_nxt - (ISS_REMOTE + 1)) & 0xFFFFFFFF  # stream offset of RCV.NXT
    seq = (t.rcv_nxt + off) & 0xFFFFFFFF
    ack = t.snd_una
    flags = tcp.ACK
    payload = b""
    if kind == "overlap":  # a retransmission that overlaps: the true bytes at that place
        start = max(0, base + off)
        payload = data[start : min(start + length, sent_upto)]
        seq = (ISS_REMOTE + 1 + start) & 0xFFFFFFFF
    elif kind == "far_garbage":
        seq = (t.rcv_nxt + 1_000_000 + off) & 0xFFFFFFFF
        payload = rng.randbytes(length)
    elif kind == "rst_near":
        flags = tcp.RST | (tcp.ACK if off % 2 else 0)
        seq = (t.rcv_nxt + (off or 1)) & 0xFFFFFFFF
    elif kind == "syn":
        flags = tcp.SYN | (tcp.ACK if off % 2 else 0)
    elif kind == "ack_unsent":
        ack = (t.snd_max + 1 + abs(off)) & 0xFFFFFFFF
        payload = rng.randbytes(length)  # dropped with the segment: the ACK is unacceptable
    elif kind == "old_ack":
        # older than SND.UNA - MAX.SND.WND (RFC 5961 §5.2): unacceptable, dropped whole
        ack = (t.snd_una - t.max_snd_wnd - 1 - abs(off)) & 0xFFFFFFFF
        payload = rng.randbytes(length)
    ts = (t.ts_recent, 0) if t.ts_ok else None
    return tcp.Repr(src_port=REMOTE_PORT, dst_port=LOCAL_PORT, seq=seq, ack=ack, flags=flags,
                    window=65535, payload=payload, timestamp=ts)


# ---------------------------------------------------------------- lying receivers
@pytest.mark.parametrize("seed", range(6))
def test_sender_survives_receivers_that_lie_in_sack_and_window(seed: int) -> None:
    """The receiver's cumulative ACKs stay honest (or nothing could be reliable), but its
    SACK blocks claim data it never got, and its window flaps to zero and back."""
    rng = random.Random(seed)
    data = rng.randbytes(300_000)

    def lie(s: tcp.Repr) -> tcp.Repr:
        if rng.random() < 0.3:  # bogus SACK block just above the cumulative ACK
            start = (s.ack + rng.choice((0, rng.randrange(1, 20_000)))) & 0xFFFFFFFF
            s = s._replace(sack_blocks=((start, (start + rng.randrange(1, 30_000))
                                         & 0xFFFFFFFF),) + s.sack_blocks[:2])
        if rng.random() < 0.05:
            s = s._replace(window=0)
        return s

    net = Net(seed=seed, imp=Impairments(loss=0.03, reorder=0.05))
    original = net._transmit

    def transmit(to: str, s: tcp.Repr) -> None:
        original(to, lie(s) if to == "client" and s.flags & tcp.ACK else s)

    net._transmit = transmit  # type: ignore[method-assign]
    got = transfer(net, data, timeout=3600 * SECOND)
    assert got == data
    assert net.now < 300 * SECOND  # slowed down, never stuck
    # the lies were seen: blocks beyond SND.NXT discarded (tcp_is_sackblock_valid), or
    # SACKed data the cumulative ACK then stopped at (tcp_check_sack_reneging)
    counters = net.client.counters
    assert counters["TcpExtTCPSACKDiscard"] + counters["TcpExtTCPSACKReneging"] > 0
