"""The error queue and MSG_ZEROCOPY's id/range rules (rcunet.core.errqueue), against
Linux's msg_zerocopy_realloc, __msg_zerocopy_callback and skb_zerocopy_notify_extend."""

from __future__ import annotations

from rcunet.core.errqueue import (
    ENOMSG,
    ENTRY_TRUESIZE,
    SCM_TSTAMP_ACK,
    SCM_TSTAMP_SCHED,
    SCM_TSTAMP_SND,
    SO_EE_CODE_ZEROCOPY_COPIED,
    SO_EE_ORIGIN_TIMESTAMPING,
    SO_EE_ORIGIN_ZEROCOPY,
    SOF_OPT_ID,
    SOF_OPT_TSONLY,
    SOF_TX_ACK,
    SOF_TX_SCHED,
    SOF_TX_SOFTWARE,
    ZC_BYTE_LIMIT,
    ErrEntry,
    ErrorQueue,
    ExtendedErr,
    TxTimestamps,
    Zerocopy,
)


def _ranges(q: ErrorQueue) -> list[tuple[int, int]]:
    out = []
    while (entry := q.dequeue()) is not None:
        assert entry.ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY
        assert entry.ee.ee_code == SO_EE_CODE_ZEROCOPY_COPIED
        out.append((entry.ee.ee_info, entry.ee.ee_data))
    return out


def test_extended_err_layout_is_linux_struct() -> None:
    ee = ExtendedErr(ee_errno=110, ee_origin=2, ee_type=3, ee_code=1, ee_info=7,
                     ee_data=0xFFFFFFFF)
    raw = ee.pack()
    assert len(raw) == 16
    assert raw == (110).to_bytes(4, "little") + bytes([2, 3, 1, 0]) + \
        (7).to_bytes(4, "little") + b"\xff\xff\xff\xff"
    assert ExtendedErr.unpack(raw) == ee


def test_consecutive_completions_merge_into_the_tail() -> None:
    q = ErrorQueue()
    q.zerocopy_done(0, 1)
    q.zerocopy_done(1, 2)
    q.zerocopy_done(3, 1)
    assert len(q) == 1
    assert _ranges(q) == [(0, 3)]


def test_a_gap_or_another_origin_starts_a_new_entry() -> None:
    q = ErrorQueue()
    q.zerocopy_done(0, 1)
    q.zerocopy_done(2, 1)  # id 1 not done yet
    q.queue(ErrEntry(ExtendedErr(ee_errno=111, ee_origin=2)))
    q.zerocopy_done(3, 1)  # the tail is an ICMP error: no merge across it
    assert len(q) == 4
    ranges = []
    while (e := q.dequeue()) is not None:
        ranges.append((e.ee.ee_origin, e.ee.ee_info, e.ee.ee_data))
    assert ranges == [(5, 0, 0), (5, 2, 2), (2, 0, 0), (5, 3, 3)]


def test_read_entry_is_not_extended() -> None:
    q = ErrorQueue()
    q.zerocopy_done(0, 1)
    assert _ranges(q) == [(0, 0)]
    q.zerocopy_done(1, 1)
    assert _ranges(q) == [(1, 1)]


def test_ids_wrap_at_32_bits() -> None:
    q = ErrorQueue()
    q.zerocopy_done(0xFFFFFFFF, 1)
    q.zerocopy_done(0, 1)
    assert _ranges(q) == [(0xFFFFFFFF, 0)]


def test_empty_range_queues_nothing() -> None:
    q = ErrorQueue()
    q.zerocopy_done(5, 0)
    assert not q


def test_ids_complete_when_their_last_byte_is_acked() -> None:
    zc, q = Zerocopy(), ErrorQueue()
    zc.sent(1000, end_seq=1001, tail_unsent=False, first=True)
    zc.sent(1000, end_seq=2001, tail_unsent=False, first=True)
    assert not zc.acked(1000, q)  # one byte of id 0 unacknowledged
    assert zc.acked(1001, q)
    assert _ranges(q) == [(0, 0)]
    assert zc.acked(5000, q)
    assert _ranges(q) == [(1, 1)]
    assert zc.key == 2 and not zc.pending


def test_acked_compares_sequence_numbers_modulo_2_32() -> None:
    zc, q = Zerocopy(), ErrorQueue()
    zc.sent(100, end_seq=0x10, tail_unsent=False, first=True)  # wrapped past 2**32
    assert not zc.acked(0xFFFFFFF0, q)
    assert zc.acked(0x10, q)


def test_send_onto_an_unsent_tail_extends_the_range() -> None:
    zc, q = Zerocopy(), ErrorQueue()
    zc.sent(10, end_seq=11, tail_unsent=False, first=True)
    zc.sent(10, end_seq=21, tail_unsent=True, first=True)  # same skb: same uarg
    assert len(zc.pending) == 1 and zc.key == 2
    assert not zc.acked(11, q)  # the extended range waits for its last byte
    assert zc.acked(21, q)
    assert _ranges(q) == [(0, 1)]


def test_extension_stops_at_the_byte_limit() -> None:
    zc = Zerocopy()
    zc.sent(ZC_BYTE_LIMIT, end_seq=ZC_BYTE_LIMIT, tail_unsent=False, first=True)
    zc.sent(1, end_seq=ZC_BYTE_LIMIT + 1, tail_unsent=True, first=True)
    assert [(r.lo, r.count) for r in zc.pending] == [(0, 1), (1, 1)]


def test_later_rounds_of_one_call_take_no_id() -> None:
    zc = Zerocopy()
    zc.sent(100, end_seq=100, tail_unsent=False, first=True)
    zc.sent(100, end_seq=200, tail_unsent=False, first=False)
    assert zc.key == 1
    assert [(r.lo, r.count, r.nbytes, r.end_seq) for r in zc.pending] == [(0, 1, 200, 200)]


def test_purge_completes_everything_unless_the_socket_is_dead() -> None:
    zc, q = Zerocopy(), ErrorQueue()
    zc.sent(10, end_seq=10, tail_unsent=False, first=True)
    zc.sent(10, end_seq=20, tail_unsent=False, first=True)
    assert zc.purge(q)
    assert _ranges(q) == [(0, 1)]
    zc.sent(10, end_seq=30, tail_unsent=False, first=True)
    assert not zc.purge(None)
    assert not zc.pending and not q


# -- SO_TIMESTAMPING (TxTimestamps) ------------------------------------------------------
TX_ALL = SOF_TX_SCHED | SOF_TX_SOFTWARE | SOF_TX_ACK | SOF_OPT_ID


def _stamps(q: ErrorQueue) -> list[tuple[int, int, int, int]]:
    out = []
    while (e := q.dequeue()) is not None:
        assert (e.ee.ee_errno, e.ee.ee_origin) == (ENOMSG, SO_EE_ORIGIN_TIMESTAMPING)
        assert e.tstamp_ns is not None
        out.append((e.ee.ee_info, e.ee.ee_data, e.tstamp_ns, len(e.payload)))
    return out


def _ts(flags: int = TX_ALL, base: int = 1000) -> TxTimestamps:
    ts = TxTimestamps()
    ts.flags, ts.key_base = flags, base
    return ts


def test_the_segment_carrying_the_last_byte_is_stamped_sched_then_snd() -> None:
    ts, q = _ts(), ErrorQueue()
    ts.wrote(1000 + 2999, tail_unsent=False)
    assert not ts.transmitted(1000, 2000, b"x" * 1000, 5, q)  # not the last byte
    assert ts.transmitted(3000, 4000, b"y" * 1000, 7, q)
    assert _stamps(q) == [(SCM_TSTAMP_SCHED, 2999, 7, 1000), (SCM_TSTAMP_SND, 2999, 7, 1000)]


def test_ack_stamp_once_the_cumulative_ack_passes_the_byte() -> None:
    ts, q = _ts(), ErrorQueue()
    ts.wrote(1099, tail_unsent=False)
    ts.transmitted(1000, 1100, b"z" * 100, 1, q)
    _stamps(q)
    assert not ts.acked(1099, 2, q)  # the byte itself is not acknowledged yet
    assert ts.acked(1100, 3, q)
    assert _stamps(q) == [(SCM_TSTAMP_ACK, 99, 3, 100)]
    assert not ts.acked(5000, 4, q) and not ts.requests


def test_a_write_into_the_same_unsent_skb_moves_the_request() -> None:
    ts = _ts()
    ts.wrote(1009, tail_unsent=False)
    ts.wrote(1019, tail_unsent=True)
    assert [r.tskey for r in ts.requests] == [1019]
    ts.wrote(1029, tail_unsent=False)  # the bytes before had left: a request of its own
    assert [r.tskey for r in ts.requests] == [1019, 1029]


def test_without_opt_id_the_key_is_zero_and_tsonly_drops_the_payload() -> None:
    ts, q = _ts(SOF_TX_SOFTWARE | SOF_OPT_TSONLY), ErrorQueue()
    ts.wrote(1499, tail_unsent=False)
    ts.transmitted(1000, 1500, b"p" * 500, 9, q)
    assert _stamps(q) == [(SCM_TSTAMP_SND, 0, 9, 0)]


def test_no_transmit_flags_no_request() -> None:
    ts = _ts(SOF_OPT_ID)
    ts.wrote(1499, tail_unsent=False)
    assert not ts.requests


def test_sequence_wrap() -> None:
    ts, q = _ts(TX_ALL, base=0xFFFFFF00), ErrorQueue()
    ts.wrote(0x10, tail_unsent=False)
    assert ts.transmitted(0xFFFFFFF0, 0x20, b"w" * 0x30, 1, q)
    assert _stamps(q)[0][1] == 0x110
    assert not ts.acked(0xFFFFFFFF, 2, q)
    assert ts.acked(0x11, 3, q)


def test_timestamps_beyond_the_receive_buffer_are_dropped() -> None:
    ts, q = _ts(SOF_TX_SOFTWARE), ErrorQueue()
    limit = 3 * (1000 + ENTRY_TRUESIZE)
    for i in range(5):
        ts.wrote(1000 + 1000 * i + 999, tail_unsent=False)
        ts.transmitted(1000 + 1000 * i, 2000 + 1000 * i, b"x" * 1000, i, q, limit)
    assert len(q) == 2 and q.dropped == 3  # a third would reach the limit
    q.dequeue()
    ts.wrote(6999, tail_unsent=False)
    assert ts.transmitted(6000, 7000, b"y" * 1000, 9, q, limit)  # room again
    assert len(q) == 2


def test_zerocopy_notifications_are_never_dropped() -> None:
    q = ErrorQueue()
    for i in range(0, 20, 2):
        q.zerocopy_done(i, 1)  # gaps: one entry each
    assert len(q) == 10 and q.charged == 10 * ENTRY_TRUESIZE
    while q.dequeue() is not None:
        pass
    assert q.charged == 0
