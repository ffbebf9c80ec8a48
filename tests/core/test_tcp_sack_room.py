"""SACK blocks and the MTU: a data segment carries only the blocks its payload leaves
room for within SND.MSS (``Receiver.sack_blocks``); pure ACKs carry them all."""

from __future__ import annotations

from tcp_harness import ISS_REMOTE, established, plain_options, seg, send


def test_full_sized_data_segment_carries_no_sack_blocks() -> None:
    conn = established(plain_options(sack=True), peer_mss=1460)
    mss = conn.tcb.snd_mss
    out = send(conn, seg(seq=ISS_REMOTE + 1 + 1000, payload=b"x" * 100))  # leaves a hole
    assert out and out[-1].sack_blocks == ((ISS_REMOTE + 1 + 1000, ISS_REMOTE + 1 + 1100),)
    conn.send(b"d" * mss, 0)
    data = [o for o in conn.take_segments() if o.payload]
    assert len(data) == 1 and len(data[0].payload) == mss
    assert data[0].sack_blocks == ()  # 1460 bytes + a block would pass the MTU
    # a pure ACK still reports the block (another out-of-order segment's dup ACK)
    out = send(conn, seg(seq=ISS_REMOTE + 1 + 2000, payload=b"y" * 100))
    assert [o for o in out if not o.payload][-1].sack_blocks
