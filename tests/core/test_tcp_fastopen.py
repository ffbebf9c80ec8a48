"""TCP Fast Open's server rules (rcunet.core.tcp.fastopen): Linux's SipHash cookie, the
key formats, the option a SYN carries, tcp_try_fastopen's decision, and a Connection
that takes a SYN's data (tcp_fastopen_create_child)."""

from __future__ import annotations

import ipaddress

import pytest

from rcunet.core.tcp import Connection
from rcunet.core.tcp import State as S
from rcunet.core.tcp import fastopen as fo
from rcunet.wire import tcp

KEY = fo.parse_key_text("a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4")[0]
ZERO = bytes(16)


def ip(text: str) -> bytes:
    return ipaddress.ip_address(text).packed


def test_siphash24_reference_vector() -> None:
    # the SipHash paper's test vector: key 00..0f, message 00..0e
    assert fo.siphash24(bytes(range(16)), bytes(range(15))) == 0xA129CA6149BE45E5


@pytest.mark.parametrize(("key", "src", "dst", "want"), [
    # the cookies the kernel's and google's runners pass as TFO_COOKIE / TFO_COOKIE_ZERO
    (KEY, "192.0.2.1", "192.168.0.1", "3021b9d889017eeb"),
    (KEY, "fd3d:fa7b:d17d::1", "fd3d:a0b:17d6::1", "c1d1e9742a47a9bc"),
    (ZERO, "192.0.2.1", "192.168.0.1", "b7c12350a90dc8f5"),
    (ZERO, "fd3d:fa7b:d17d::1", "fd3d:a0b:17d6::1", "82af1a8f9a205c34"),
])
def test_cookie_is_linux_cookie(key: bytes, src: str, dst: str, want: str) -> None:
    assert fo.cookie(key, ip(src), ip(dst)).hex() == want


def test_key_text_round_trip_and_backup() -> None:
    keys = fo.parse_key_text("00000001-00000002-00000003-00000004,ffffffff-0-0-0")
    assert keys[0] == bytes([1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0, 0, 0])
    assert fo.key_text(keys[1]) == "ffffffff-00000000-00000000-00000000"
    for bad in ("", "1-2-3", "1-2-3-4-5", "x-2-3-4", "123456789-0-0-0", "a,b,c"):
        with pytest.raises(ValueError):
            fo.parse_key_text(bad)


def test_syn_cookie_option_parsing() -> None:
    exp = (fo.OPT_EXP, b"\xf9\x89" + bytes(8))
    assert fo.syn_cookie((exp,)) == fo.SynCookie(bytes(8), True)
    assert fo.syn_cookie(((fo.OPT_FASTOPEN, b""),)) == fo.SynCookie(b"", False)
    assert fo.syn_cookie(((fo.OPT_EXP, b"\x12\x34" + bytes(8)),)) is None  # other ExID
    assert fo.syn_cookie(((fo.OPT_FASTOPEN, bytes(3)),)) is None  # odd: skipped
    assert fo.syn_cookie(((fo.OPT_FASTOPEN, bytes(2)),)) is None  # too short: invalid
    assert fo.syn_cookie(((fo.OPT_FASTOPEN, bytes(18)),)) is None  # too long: invalid
    assert fo.syn_cookie(((fo.OPT_FASTOPEN, bytes(4)),)) == fo.SynCookie(bytes(4), False)


def decide(**kw: object) -> fo.ServerDecision:
    args: dict[str, object] = dict(sysctl=0x3, no_cookie=False, queue_ok=True, syn_data=True,
                                   offered=None, keys=(KEY,), saddr=ip("192.0.2.1"),
                                   daddr=ip("192.168.0.1"))
    args.update(kw)
    return fo.server_decision(**args)  # type: ignore[arg-type]


def test_decision_valid_cookie_opens_fast_without_reply() -> None:
    good = fo.SynCookie(bytes.fromhex("3021b9d889017eeb"), False)
    d = decide(offered=good)
    assert d.fastopen and d.reply is None
    assert d.counters == ("TcpExtTCPFastOpenPassive",)


def test_decision_request_and_bad_cookie_get_the_valid_cookie() -> None:
    valid = bytes.fromhex("3021b9d889017eeb")
    d = decide(offered=fo.SynCookie(b"", True), syn_data=False)
    assert not d.fastopen and d.reply == (fo.OPT_EXP, b"\xf9\x89" + valid)
    assert d.counters == ("TcpExtTCPFastOpenCookieReqd",)
    d = decide(offered=fo.SynCookie(bytes(8), False))
    assert not d.fastopen and d.reply == (fo.OPT_FASTOPEN, valid)
    assert d.counters == ("TcpExtTCPFastOpenPassiveFail",)


def test_decision_backup_key_opens_and_hands_out_primary() -> None:
    backup_cookie = fo.cookie(ZERO, ip("192.0.2.1"), ip("192.168.0.1"))
    d = decide(offered=fo.SynCookie(backup_cookie, False), keys=(KEY, ZERO))
    assert d.fastopen
    assert d.reply == (fo.OPT_FASTOPEN, bytes.fromhex("3021b9d889017eeb"))
    assert "TcpExtTCPFastOpenPassiveAltKey" in d.counters


@pytest.mark.parametrize("kw", [dict(sysctl=0x1), dict(queue_ok=False),
                                dict(syn_data=False)])
def test_decision_off(kw: dict[str, object]) -> None:
    d = decide(offered=fo.SynCookie(bytes.fromhex("3021b9d889017eeb"), False)
               if "syn_data" not in kw else None, **kw)
    assert not d.fastopen and d.reply is None


def test_decision_without_cookie_when_not_required() -> None:
    assert decide(sysctl=0x203).fastopen
    assert decide(no_cookie=True).fastopen
    assert not decide(no_cookie=True, syn_data=False).fastopen
    assert not decide().fastopen  # data but no cookie, cookie required


def syn(payload: bytes = b"hello") -> tcp.Repr:
    return tcp.Repr(src_port=40000, dst_port=80, seq=1000, ack=0, flags=tcp.SYN,
                    window=30000, payload=payload, mss=1460)


def test_fastopen_child_takes_syn_data_and_acks_it() -> None:
    conn = Connection.accept_syn(syn(), iss=5000, now=0, fastopen=True)
    (synack,) = conn.take_segments()
    assert synack.flags == tcp.SYN | tcp.ACK and synack.ack == 1006
    assert conn.state is S.SYN_RECEIVED and conn.readable == 5 and conn.syn_data_acked
    assert conn.recv(100, 0) == b"hello"


def test_ordinary_child_drops_syn_data_and_carries_cookie_once() -> None:
    cookie = fo.cookie_option(bytes(8), False)
    conn = Connection.accept_syn(syn(), iss=5000, now=0, synack_options=(cookie,))
    (synack,) = conn.take_segments()
    assert synack.ack == 1001 and synack.unknown_options == (cookie,)
    assert conn.readable == 0 and not conn.syn_data_acked
    conn.on_timer(conn.next_deadline() or 0)  # the SYN,ACK retransmission
    (again,) = conn.take_segments()
    assert again.flags == tcp.SYN | tcp.ACK and again.unknown_options == ()


def test_fastopen_child_sends_in_syn_received_and_keeps_data_across_synack_rtx() -> None:
    conn = Connection.accept_syn(syn(), iss=5000, now=0, fastopen=True)
    conn.take_segments()
    assert conn.send(b"x" * 100, 0) == 100
    (data,) = conn.take_segments()
    assert data.seq == 5001 and len(data.payload) == 100
    conn.on_timer(conn.next_deadline() or 0)
    out = conn.take_segments()
    assert out[0].flags == tcp.SYN | tcp.ACK
    assert conn.tcb.snd_max == 5101  # the data is still in flight
    ack = tcp.Repr(src_port=40000, dst_port=80, seq=1006, ack=5101, flags=tcp.ACK,
                   window=30000)
    conn.on_segment(ack, 2_000_000_000)
    assert conn.state is S.ESTABLISHED and conn.unacked == 0


def test_fastopen_child_reset_is_econnreset_after_data() -> None:
    conn = Connection.accept_syn(syn(), iss=5000, now=0, fastopen=True)
    rst = tcp.Repr(src_port=40000, dst_port=80, seq=1006, ack=0, flags=tcp.RST, window=0)
    conn.on_segment(rst, 1)
    assert conn.state is S.CLOSED
    assert conn.recv(100, 1) == b"hello"
    with pytest.raises(ConnectionResetError):
        conn.recv(100, 1)


def test_syn_data_space_is_the_mss_minus_option_room() -> None:
    assert fo.syn_data_space(1460, None, 5000) == 1420  # MAX_TCP_OPTION_SPACE kept free
    assert fo.syn_data_space(1460, 940, 5000) == 900  # bounded by the cached server MSS
    assert fo.syn_data_space(1460, None, 300) == 300


def test_client_cookie_check_and_cache_update() -> None:
    ok, opt, mss = fo.client_cookie(None, no_cookie=False)
    assert not ok and opt == fo.SynCookie(b"", False) and mss is None  # a request
    assert fo.client_cookie(None, no_cookie=True) == (True, None, None)
    asked = fo.ActiveOpen(option_sent=True, exp=False, data_len=0, answered=True,
                          peer_mss=1400, cookie=fo.SynCookie(b"abcd", True))
    entry = fo.cache_update(None, asked)
    assert entry == fo.CachedCookie(1400, b"abcd", True, 0)
    assert fo.client_cookie(entry, no_cookie=False) == (True, fo.SynCookie(b"abcd", True),
                                                         1400)
    # a request answered without a cookie: try the experimental option next time
    unanswered = fo.ActiveOpen(option_sent=True, exp=False, data_len=0, answered=True)
    entry = fo.cache_update(None, unanswered)
    assert entry.try_exp == 1
    assert fo.client_cookie(entry, no_cookie=False)[1] == fo.SynCookie(b"", True)


def test_syn_with_data_and_synack_acking_part_of_it() -> None:
    conn = Connection.connect(local_port=40000, remote_port=80, iss=100, now=0,
                              syn_data=b"x" * 50,
                              fastopen_option=fo.cookie_option(b"abcd", False))
    (syn_seg,) = conn.take_segments()
    assert len(syn_seg.payload) == 50 and syn_seg.unknown_options == ((34, b"abcd"),)
    synack = tcp.Repr(src_port=80, dst_port=40000, seq=7000, ack=121, flags=tcp.SYN | tcp.ACK,
                      window=30000, mss=1460,
                      unknown_options=((34, b"wxyz"),))
    conn.on_segment(synack, 1_000_000)
    attempt = conn.fastopen_active
    assert attempt is not None and attempt.data_acked == 20
    assert attempt.cookie == fo.SynCookie(b"wxyz", False)
    assert not conn.syn_data_acked
    (rest,) = conn.take_segments()  # the 30 bytes not acknowledged go again, with the ACK
    assert rest.seq == 121 and len(rest.payload) == 30 and rest.flags & tcp.ACK


def test_syn_retransmission_carries_neither_data_nor_option() -> None:
    conn = Connection.connect(local_port=40000, remote_port=80, iss=100, now=0,
                              syn_data=b"y" * 10,
                              fastopen_option=fo.cookie_option(b"abcd", False))
    conn.take_segments()
    conn.on_timer(conn.next_deadline() or 0)
    (again,) = conn.take_segments()
    assert again.flags == tcp.SYN and not again.payload and again.unknown_options == ()
    assert conn.tcb.snd_max == 111  # the data stays in flight behind the SYN
