"""ECN/AccECN rules (rcunet.core.tcp.accecn) against Linux 7.0's: negotiation for each
tcp_ecn value, the ACE counter and its wrap, the option's byte counters and its sending
rules; bad feedback is counted, never raised."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.tcp import accecn as a
from rcunet.core.tcp.accecn import EcnMode, OptionSeen, TcpEcn
from rcunet.wire import ecn
from rcunet.wire import tcp as w
from rcunet.wire.tcp_options import AccEcnOption

SYN_ACCECN = w.AE | w.CWR | w.ECE
SYN_CLASSIC = w.CWR | w.ECE


# ------------------------------------------------------------------- negotiation
@pytest.mark.parametrize("tcp_ecn,flags,mode", [
    (0, 0, EcnMode.DISABLED), (1, SYN_CLASSIC, EcnMode.RFC3168), (2, 0, EcnMode.DISABLED),
    (3, SYN_ACCECN, EcnMode.PENDING), (4, SYN_CLASSIC, EcnMode.RFC3168),
    (5, 0, EcnMode.DISABLED),
])
def test_syn_asks_as_tcp_ecn_says(tcp_ecn: int, flags: int, mode: EcnMode) -> None:
    assert a.syn_request(tcp_ecn) == (flags, mode)


def test_congestion_control_can_ask_for_ecn_itself() -> None:
    assert a.syn_request(0, ca_needs_ecn=True) == (SYN_CLASSIC, EcnMode.RFC3168)
    assert a.syn_request(2, ca_needs_accecn=True) == (SYN_ACCECN, EcnMode.PENDING)


def test_retransmitted_syn_falls_back() -> None:
    """RFC 3168: the first retransmission goes without ECN; AccECN keeps asking once."""
    syn = w.SYN | SYN_ACCECN
    assert a.retransmitted_syn_flags(syn, EcnMode.PENDING, 1) == syn
    assert a.retransmitted_syn_flags(syn, EcnMode.PENDING, 2) == w.SYN
    assert a.retransmitted_syn_flags(w.SYN | SYN_CLASSIC, EcnMode.RFC3168, 1) == w.SYN
    assert a.retransmitted_syn_flags(w.SYN | SYN_CLASSIC, EcnMode.RFC3168, 1,
                                     fallback=False) == w.SYN | SYN_CLASSIC


@pytest.mark.parametrize("value", range(8))
def test_which_syns_ask_for_accecn(value: int) -> None:
    assert a.accecn_syn_requested(w.with_ace(w.SYN, value)) == (value not in (0, 3))


@pytest.mark.parametrize("tcp_ecn", range(6))
def test_listener_answers_by_tcp_ecn(tcp_ecn: int) -> None:
    accecn = a.answer_syn(tcp_ecn, w.SYN | SYN_ACCECN, ecn.ECT_0)
    classic = a.answer_syn(tcp_ecn, w.SYN | SYN_CLASSIC, ecn.NOT_ECT)
    plain = a.answer_syn(tcp_ecn, w.SYN, ecn.NOT_ECT)
    if tcp_ecn >= 3:
        assert accecn == (EcnMode.ACCECN, ecn.ECT_0)
    elif tcp_ecn:
        assert accecn.mode is EcnMode.RFC3168  # AE set: ECT SYN accepted (RFC 8311)
    else:
        assert accecn.mode is EcnMode.DISABLED
    assert classic.mode is (EcnMode.RFC3168 if tcp_ecn else EcnMode.DISABLED)
    assert plain.mode is EcnMode.DISABLED


def test_ect_classic_syn_is_refused_unless_a_reserved_bit_is_set() -> None:
    """RFC 3168 §6.1.1: an ECT SYN means a middlebox rewrites TOS; RFC 8311 §4.3 allows
    it when a reserved bit says a newer extension is in use."""
    assert a.answer_syn(1, w.SYN | SYN_CLASSIC, ecn.ECT_0).mode is EcnMode.DISABLED
    assert a.answer_syn(1, w.SYN | SYN_CLASSIC, ecn.ECT_0, reserved=1).mode is EcnMode.RFC3168


@pytest.mark.parametrize("ip,value", [(ecn.NOT_ECT, 0b010), (ecn.ECT_1, 0b011),
                                      (ecn.ECT_0, 0b100), (ecn.CE, 0b110)])
def test_synack_reflects_the_syn_ecn_field(ip: int, value: int) -> None:
    assert w.ace(a.synack_flags(EcnMode.ACCECN, ip)) == value
    assert a.syn_ect_from_ace(value) == ip
    assert a.synack_flags(EcnMode.RFC3168, ip) == w.ECE
    assert a.synack_flags(EcnMode.DISABLED, ip) == 0


@pytest.mark.parametrize("mode", [EcnMode.ACCECN, EcnMode.RFC3168])
def test_synack_retransmitted_after_a_timeout_carries_no_ecn_flags(mode: EcnMode) -> None:
    """RFC 9768 §3.2.3.2.2 as Linux's tcp_ecn_make_synack has it: once a SYN-ACK timed
    out, the next retransmission goes with ACE = 0 (no ECE for classic ECN either)."""
    assert a.synack_flags(mode, ecn.ECT_1) != 0
    assert a.synack_flags(mode, ecn.ECT_1, after_timeout=True) == 0


@pytest.mark.parametrize("value,mode", [
    (0b000, EcnMode.DISABLED), (0b111, EcnMode.DISABLED), (0b001, EcnMode.RFC3168),
    (0b101, EcnMode.ACCECN), (0b010, EcnMode.ACCECN), (0b011, EcnMode.ACCECN),
    (0b100, EcnMode.ACCECN), (0b110, EcnMode.ACCECN),
])
def test_synack_decides_the_client_mode(value: int, mode: EcnMode) -> None:
    """RFC 9768 Table 2 as tcp_ecn_rcv_synack reads it."""
    got = a.after_synack(EcnMode.PENDING, w.SYN | w.ACK | w.with_ace(0, value), ecn.ECT_0)
    assert got.mode is mode
    assert a.after_synack(EcnMode.DISABLED, w.with_ace(w.SYN, value), 0).mode is \
        EcnMode.DISABLED


def test_ce_marked_synack_counts_when_the_feedback_is_possible() -> None:
    ok = a.after_synack(EcnMode.PENDING, w.with_ace(w.SYN | w.ACK, 0b010), ecn.CE,
                        syn_ect_snt=ecn.NOT_ECT)
    assert ok == (EcnMode.ACCECN, True, False, ecn.CE)
    # We sent a Not-ECT SYN and are told it arrived ECT(0): the feedback is broken.
    bad = a.after_synack(EcnMode.PENDING, w.with_ace(w.SYN | w.ACK, 0b100), ecn.CE,
                         syn_ect_snt=ecn.NOT_ECT)
    assert bad.ace_fail and not bad.ce


def test_third_ack_table() -> None:
    assert a.third_ack(w.ACK, True, ecn.NOT_ECT).ace_fail
    for unused in (0b001, 0b101, 0b111):
        assert a.third_ack(w.with_ace(w.ACK, unused), True, ecn.NOT_ECT) == (False, False)
    assert a.third_ack(w.with_ace(w.ACK, 0b110), True, ecn.ECT_0) == (False, True)
    assert a.third_ack(w.with_ace(w.ACK, 0b110), False, ecn.ECT_0) == (False, False)
    assert a.third_ack(w.with_ace(w.ACK, 0b100), True, ecn.NOT_ECT).ace_fail


def test_crossed_syns_and_the_classic_echo() -> None:
    assert a.after_crossed_syn(EcnMode.PENDING, w.SYN | SYN_ACCECN) is EcnMode.ACCECN
    assert a.after_crossed_syn(EcnMode.PENDING, w.SYN | SYN_CLASSIC) is EcnMode.RFC3168
    assert a.after_crossed_syn(EcnMode.PENDING, w.SYN) is EcnMode.DISABLED
    assert a.ece_is_echo(EcnMode.RFC3168, w.ACK | w.ECE)
    assert not a.ece_is_echo(EcnMode.DISABLED, w.ACK | w.ECE)  # ECN bits ignored
    assert not a.ece_is_echo(EcnMode.RFC3168, w.SYN | w.ACK | w.ECE)


# ------------------------------------------------------------- receiver's counters
def test_receiver_counts_ce_and_bytes_and_feeds_back_ace() -> None:
    r = a.AccEcnReceiver()
    assert r.ace() == a.CEP_INIT
    assert r.on_segment(ecn.ECT_0, 1000)  # the field changed: ACK now
    assert not r.on_segment(ecn.ECT_0, 1000)
    r.on_segment(ecn.CE, 500)
    assert (r.received_ce, r.received_bytes[ecn.CE], r.received_bytes[ecn.ECT_0]) == \
        (1, 500, 2000)
    assert r.opt_demand == 2 and r.minlen == 3
    assert r.ace() == 6 and r.received_ce_pending == 0
    for _ in range(8):
        r.on_segment(ecn.CE, 0, accecn=True)  # pure ACKs count in ACE too
    assert r.ace() == 6  # eight more marks: ACE wrapped round to the same value
    for _ in range(20):
        r.on_segment(ecn.CE, 0)
    assert r.received_ce_pending == 15 and r.ack_now()


def test_receiver_option_in_linuxs_order_with_offsets() -> None:
    r = a.AccEcnReceiver()
    r.on_segment(ecn.ECT_1, 10)
    r.on_segment(ecn.CE, 20)
    r.on_segment(ecn.ECT_0, 30)
    option = r.option(3, now_us=5)
    assert option.kind == a.ACCECN1
    assert option.fields == (10 + a.E1B_INIT, 20 + a.CEB_INIT, 30 + a.E0B_INIT)
    assert (option.e1b, option.ceb, option.e0b) == (11, 20, 31)
    assert r.minlen == 0 and r.opt_demand == 1 and r.opt_sent_at == 5
    assert a.synack_option(3).fields == (1, 0, 1)
    assert a.synack_option(3, kind=a.ACCECN0).fields == (1, 0, 1)


def test_receiver_demands_an_option_every_4_mib() -> None:
    r = a.AccEcnReceiver(prev_ecnfield=ecn.ECT_0)
    r.on_segment(ecn.ECT_0, (1 << 22) - 1)
    assert r.opt_demand == 0
    r.on_segment(ecn.ECT_0, 1)
    assert r.opt_demand == 1


# ----------------------------------------------------------- sender's feedback
def _ack(value: int) -> int:
    return w.with_ace(w.ACK, value)


def test_ace_deltas_below_eight_are_exact() -> None:
    s = a.AccEcnSender()
    assert s.ce_delta(_ack(a.CEP_INIT), None, 3, 3000, mss=1000) == 0
    assert s.ce_delta(_ack(a.CEP_INIT + 2), None, 3, 3000, mss=1000) == 2
    assert s.ce_delta(_ack((a.CEP_INIT + 9) & 7), None, 7, 7000, mss=1000) == 7
    assert s.delivered_ce == 9


def test_wrapping_ace_without_option_is_read_conservatively() -> None:
    """20 packets acknowledged at once and ACE moved by 1: 1, 9 or 17 marks.  Without
    byte counters and after ACKs of one packet each Linux assumes the most (safe_delta);
    when ACKs are usually compressed it trusts ACE (the pkts_acked_ewma)."""
    s = a.AccEcnSender()
    assert s.ce_delta(_ack(a.CEP_INIT), None, 1, 1000, mss=1000) == 0
    assert s.ce_delta(_ack(a.CEP_INIT + 1), None, 20, 20000, mss=1000) == 17
    assert s.counters["AccEcnAceMayHaveWrapped"] == 1
    compressed = a.AccEcnSender()
    assert compressed.ce_delta(_ack(a.CEP_INIT + 1), None, 20, 20000, mss=1000) == 1


def test_wrapping_ace_is_settled_by_the_ce_byte_counter() -> None:
    """The same ACK with the option: 9000 of the 20000 bytes arrived CE, so 9 marks
    (the ECT(0) counter moving too is what the estimate expected)."""
    s = a.AccEcnSender()
    first = AccEcnOption(a.ACCECN1, (1, 0, 1001))  # 1000 ECT(0) bytes: the estimate
    assert s.ce_delta(_ack(a.CEP_INIT), first, 1, 1000, mss=1000) == 0
    assert s.est_ecnfield == ecn.ECT_0
    nine_marks = AccEcnOption(a.ACCECN1, (1, 9000, 12001))
    assert s.ce_delta(_ack(a.CEP_INIT + 1), nine_marks, 20, 20000, mss=1000) == 9
    assert s.delivered_ce == 9 and not s.counters["AccEcnAmbiguousBytes"]


def test_impossible_option_counters_are_counted_not_raised() -> None:
    s = a.AccEcnSender()
    s.process_option(AccEcnOption(a.ACCECN1, (1, 3000, 1)), 3000)
    # CE bytes going back, ECT(1) forward: ambiguous, the estimate is dropped
    assert not s.process_option(AccEcnOption(a.ACCECN1, (6000, 2000, 1)), 1000)
    assert s.counters["AccEcnAmbiguousBytes"] == 1 and s.est_ecnfield == 0
    zeroed = a.AccEcnSender()
    assert not zeroed.process_option(AccEcnOption(a.ACCECN1, (0, 0, 1)), 0)
    assert zeroed.opt_fail_recv and zeroed.counters["AccEcnOptionZeroed"] == 1
    assert not zeroed.process_option(AccEcnOption(a.ACCECN1, (100, 0, 1)), 100)


def test_byte_counters_wrap_at_24_bits() -> None:
    s = a.AccEcnSender()
    s.delivered_bytes[ecn.ECT_1] = 0xFFFFF0
    s.process_option(AccEcnOption(a.ACCECN1, (0x10 + 1,)), 0x20)
    assert s.delivered_bytes[ecn.ECT_1] == 0x1000010


def test_option_is_trusted_only_after_it_was_seen_early() -> None:
    s = a.AccEcnSender()
    assert not s.process_option(None, 1000, bytes_sent=1 << 23)
    assert s.saw_opt is OptionSeen.FAIL and s.opt_fail_recv


@pytest.mark.parametrize("fields,seen", [
    ((), OptionSeen.EMPTY), ((0,), OptionSeen.FAIL), ((1, 0), OptionSeen.COUNTER),
    ((1, 0, 0), OptionSeen.FAIL), ((1, 0, 1), OptionSeen.COUNTER),
])
def test_option_zeroing_detection(fields: tuple[int, ...], seen: OptionSeen) -> None:
    assert a.option_seen(AccEcnOption(a.ACCECN1, fields)) is seen


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.lists(st.booleans(), min_size=1, max_size=7), st.booleans()),
                max_size=40))
def test_sender_learns_every_mark_when_acks_cover_at_most_seven(
        rounds: list[tuple[list[bool], bool]]) -> None:
    """A receiver and a sender paired over ACKs that each cover 1-7 packets: whatever
    the marks, the sender's count of CE deliveries equals the receiver's."""
    r, s = a.AccEcnReceiver(), a.AccEcnSender()
    for marks, with_option in rounds:
        for ce in marks:
            r.on_segment(ecn.CE if ce else ecn.ECT_0, 1000)
        option = r.option(3, 0) if with_option else None
        s.ce_delta(_ack(r.ace()), option, len(marks), 1000 * len(marks), mss=1000)
    assert s.delivered_ce == r.received_ce


# ----------------------------------------------------------- option sending rules
def test_option_fit() -> None:
    assert a.fit_option(0, 28) == (3, 12, 0)   # after timestamps: all three fields
    assert a.fit_option(0, 8) == (2, 8, 0)
    assert a.fit_option(0, 4) == (0, 4, 0)
    assert a.fit_option(0, 3) == (-1, 0, 0)
    # one field shares a SACK word's NOPs: 5 bytes take 4
    assert a.fit_option(1, 4, num_sack_blocks=1) == (1, 4, 1)
    # three SACK blocks fill the space: the option takes one block's room
    assert a.fit_option(1, 0, num_sack_blocks=3) == (2, 0, 2)
    assert a.fit_option(0, 16, combine_saving=a.synack_combine_saving(True, True, True)) \
        == (3, 12, 0)


def test_when_the_option_goes_out() -> None:
    full, minimum = a.EcnOption.FULL, a.EcnOption.MINIMUM
    assert a.wants_option(full, OptionSeen.COUNTER, False, 0, False)
    assert not a.wants_option(full, OptionSeen.NOT_SEEN, False, 0, False)
    assert not a.wants_option(a.EcnOption.DISABLED, OptionSeen.COUNTER, False, 1, True)
    assert not a.wants_option(full, OptionSeen.COUNTER, True, 0, False)
    assert a.wants_option(a.EcnOption.PERSIST, OptionSeen.COUNTER, True, 0, False)
    assert not a.wants_option(minimum, OptionSeen.COUNTER, False, 0, False)
    assert a.wants_option(minimum, OptionSeen.COUNTER, False, 1, False)
    assert a.wants_option(minimum, OptionSeen.COUNTER, False, 0, True)
    # three per RTT: due once a third of the smoothed RTT passed
    assert not a.beacon_due(now_us=1000 + 3332, sent_at_us=1000, srtt_us=10000, beacon=3)
    assert a.beacon_due(now_us=1000 + 3334, sent_at_us=1000, srtt_us=10000, beacon=3)
    assert not a.beacon_due(10**9, 0, 1, beacon=0)


def test_sysctl_defaults_are_linuxs() -> None:
    d = a.EcnSysctls()
    assert (d.tcp_ecn, d.tcp_ecn_option, d.tcp_ecn_option_beacon, d.tcp_ecn_fallback) == (
        TcpEcn.IN_ECN_OUT_NOECN, a.EcnOption.FULL, 3, True)


# ------------------------------------------------------------------ RFC 3168
def test_classic_receiver_echoes_ce_until_cwr() -> None:
    r = a.Rfc3168()
    assert not r.on_data(ecn.NOT_ECT)           # nothing seen yet
    assert not r.on_data(ecn.ECT_0) and r.seen
    assert r.on_data(ecn.CE) and r.demand_cwr    # first mark: ACK quickly
    assert not r.on_data(ecn.CE)                 # already echoing
    out = a.outgoing(EcnMode.RFC3168, new_data=False, rfc3168=r)
    assert out == (ecn.NOT_ECT, w.ECE)           # pure ACK: Not-ECT, ECE
    assert r.on_cwr(has_data=True) and not r.demand_cwr
    assert a.outgoing(EcnMode.RFC3168, new_data=False, rfc3168=r) == (ecn.NOT_ECT, 0)
    assert r.on_data(ecn.NOT_ECT)                # Not-ECT after ECT: a retransmission


def test_classic_sender_marks_new_data_and_sends_cwr_once() -> None:
    r = a.Rfc3168()
    r.on_reduction()
    assert a.outgoing(EcnMode.RFC3168, new_data=True, rfc3168=r) == (ecn.ECT_0, w.CWR)
    assert a.outgoing(EcnMode.RFC3168, new_data=True, rfc3168=r) == (ecn.ECT_0, 0)
    # a retransmission is Not-ECT (RFC 3168 §6.1.5) unless the CC wants ECT everywhere
    assert a.outgoing(EcnMode.RFC3168, new_data=False, rfc3168=r).ip_ecn == ecn.NOT_ECT
    assert a.outgoing(EcnMode.RFC3168, new_data=False, rfc3168=r,
                      ca_needs_ecn=True).ip_ecn == ecn.ECT_0
    r.on_reduction()
    r.on_undo()
    assert a.outgoing(EcnMode.RFC3168, new_data=True, rfc3168=r).flags == 0
    assert a.outgoing(EcnMode.DISABLED, new_data=True) == (ecn.NOT_ECT, 0)


def test_accecn_sender_marks_everything_and_carries_ace() -> None:
    rx = a.AccEcnReceiver()
    rx.on_segment(ecn.CE, 100)
    out = a.outgoing(EcnMode.ACCECN, new_data=False, receiver=rx)
    assert out.ip_ecn == ecn.ECT_0 and w.ace(out.flags) == (a.CEP_INIT + 1) & 7
    assert rx.received_ce_pending == 0
    assert a.outgoing(EcnMode.ACCECN, new_data=True, receiver=rx, ect_1=True).ip_ecn == \
        ecn.ECT_1
    assert a.outgoing(EcnMode.ACCECN, new_data=True, receiver=rx,
                      ace_fail_recv=True).ip_ecn == ecn.NOT_ECT
