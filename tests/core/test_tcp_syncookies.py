"""SYN cookies (Linux layout) and RFC 6528 ISNs."""

from __future__ import annotations

from tcp_harness import ACK, LOCAL_PORT, MS, REMOTE_PORT, SECOND, SYN, seg

from rcunet.core.tcp import Counters, Options, State
from rcunet.core.tcp import syncookies as sc
from rcunet.core.tcp.isn import initial_sequence, timestamp_offset

SECRET = b"k" * 32
CLIENT, SERVER = bytes([10, 0, 0, 2]), bytes([10, 0, 0, 1])


def test_cookie_round_trip_recovers_mss_bucket() -> None:
    for mss, expect in ((1460, 1460), (1452, 1440), (1300, 1300), (1000, 536), (9000, 1460)):
        cookie, used = sc.encode(SECRET, CLIENT, SERVER, 5555, 80, 123456, mss, now=0)
        assert used == expect
        ack = seg(seq=123457, ack=(cookie + 1) & 0xFFFFFFFF, src_port=5555, dst_port=80)
        assert sc.check(SECRET, CLIENT, SERVER, 5555, 80, ack, now=30 * SECOND) == expect


def test_cookie_expires_after_two_minutes() -> None:
    cookie, _ = sc.encode(SECRET, CLIENT, SERVER, 5555, 80, 1, 1460, now=0)
    ack = seg(seq=2, ack=cookie + 1, src_port=5555, dst_port=80)
    assert sc.check(SECRET, CLIENT, SERVER, 5555, 80, ack, now=119 * SECOND) == 1460
    assert sc.check(SECRET, CLIENT, SERVER, 5555, 80, ack, now=120 * SECOND) == 0


def test_cookie_rejects_other_tuple_secret_or_seq() -> None:
    cookie, _ = sc.encode(SECRET, CLIENT, SERVER, 5555, 80, 1, 1460, now=0)
    ack = seg(seq=2, ack=cookie + 1, src_port=5555, dst_port=80)
    assert sc.check(SECRET, CLIENT, SERVER, 5556, 80, ack, now=0) == 0
    assert sc.check(b"other" * 8, CLIENT, SERVER, 5555, 80, ack, now=0) == 0
    assert sc.check(SECRET, CLIENT, SERVER, 5555, 80, ack._replace(seq=90_002), now=0) == 0
    forged = sum(sc.check(SECRET, CLIENT, SERVER, 5555, 80, ack._replace(ack=a), now=0) != 0
                 for a in range(1000, 3000))
    assert forged <= 2  # 4 valid indexes in 2**24: a blind guess almost never passes


def test_timestamp_carries_options_and_never_runs_ahead() -> None:
    for ts_now in (0x1000, 0x1003F, 0x12345678):
        for ws, sack in ((7, True), (None, False), (0, True), (14, False)):
            tsval = sc.encode_ts_options(ts_now, ws, sack)
            assert tsval <= ts_now or ts_now < 64
            assert sc.decode_ts_options(tsval) == sc.CookieOptions(ws, sack, False)


def test_stateless_handshake_builds_an_established_connection() -> None:
    counters = Counters()
    syn = seg(src_port=REMOTE_PORT, dst_port=LOCAL_PORT, seq=777, ack=0, flags=SYN, mss=1400,
              window_scale=3, sack_permitted=True, timestamp=(5000, 0))
    synack = sc.syn_ack_for(syn, secret=SECRET, saddr=CLIENT, daddr=SERVER, now=10 * SECOND,
                            counters=counters)
    # The SYN-ACK advertises our MSS (tcp_make_synack); the cookie carries the peer's
    # 1400 as the table's 1300, which bounds what the connection sends.
    assert synack.flags == SYN | ACK and synack.ack == 778 and synack.mss == Options().mss
    assert synack.timestamp is not None and synack.window_scale is not None
    ack = seg(seq=778, ack=synack.seq + 1, flags=ACK, window=1000, payload=b"GET /",
              timestamp=(5001, synack.timestamp[0]))
    conn = sc.connection_from_ack(ack, secret=SECRET, saddr=CLIENT, daddr=SERVER,
                                  now=10 * SECOND + 5 * MS, counters=counters)
    assert conn is not None and conn.state is State.ESTABLISHED
    assert (conn.local_addr, conn.remote_addr) == (SERVER, CLIENT)
    assert conn.tcb.snd_wscale == 3 and conn.tcb.sack_ok and conn.tcb.ts_ok
    assert conn.tcb.snd_wnd == 1000 << 3 and conn.tcb.snd_mss == 1300 - 12
    assert conn.recv(100, 10 * SECOND) == b"GET /"
    assert counters["TcpExtSyncookiesSent"] == 1 and counters["TcpExtSyncookiesRecv"] == 1
    bad = sc.connection_from_ack(ack._replace(ack=synack.seq + 4096), secret=SECRET, saddr=CLIENT,
                                 daddr=SERVER, now=10 * SECOND, counters=counters)
    assert bad is None and counters["TcpExtSyncookiesFailed"] == 1


def test_cookie_without_timestamps_drops_scaling_and_sack() -> None:
    syn = seg(seq=1, ack=0, flags=SYN, mss=1460, window_scale=7, sack_permitted=True)
    synack = sc.syn_ack_for(syn, secret=SECRET, saddr=CLIENT, daddr=SERVER, now=0,
                            options=Options())
    assert synack.window_scale is None and not synack.sack_permitted and synack.timestamp is None
    conn = sc.connection_from_ack(seg(seq=2, ack=synack.seq + 1), secret=SECRET, saddr=CLIENT,
                                  daddr=SERVER, now=0)
    assert conn is not None and conn.tcb.snd_wscale == 0 and conn.tcb.rcv_wscale == 0
    assert not conn.tcb.sack_ok and conn.tcb.snd_mss == 1460


def test_isn_depends_on_tuple_secret_and_clock() -> None:
    a = initial_sequence(SECRET, SERVER, 80, CLIENT, 5555, now=0)
    assert a == initial_sequence(SECRET, SERVER, 80, CLIENT, 5555, now=0)
    assert a != initial_sequence(SECRET, SERVER, 80, CLIENT, 5556, now=0)
    assert a != initial_sequence(b"x" * 32, SERVER, 80, CLIENT, 5555, now=0)
    # M ticks every 64 ns (Linux seq_scale)
    assert initial_sequence(SECRET, SERVER, 80, CLIENT, 5555, now=640) == (a + 10) & 0xFFFFFFFF
    assert timestamp_offset(SECRET, SERVER, CLIENT) != timestamp_offset(SECRET, CLIENT, SERVER)


def test_ipv6_uses_linux_ipv6_mss_table() -> None:
    c6, s6 = bytes(15) + b"\2", bytes(15) + b"\1"
    for mss, expect in ((1440, 1440), (1430, 1420), (9000, 8940), (600, 1220)):
        cookie, used = sc.encode(SECRET, c6, s6, 5555, 80, 99, mss, now=0)
        assert used == expect
        ack = seg(seq=100, ack=(cookie + 1) & 0xFFFFFFFF, src_port=5555, dst_port=80)
        assert sc.check(SECRET, c6, s6, 5555, 80, ack, now=0) == expect
