"""PRR (RFC 9937) as Linux's tcp_cwnd_reduction computes it, and the reduction episode
(tcp_init_cwnd_reduction, tcp_enter_cwr, tcp_end_cwnd_reduction)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.tcp import prr
from rcunet.core.tcp.prr import CaState, Reduction


def test_first_ack_forces_the_fast_retransmit() -> None:
    """prior_cwnd 10, ssthresh 7 (CUBIC's 0.7), 10 in flight, one SACKed: the
    proportional share is ceil(7 * 1 / 10) = 1 segment."""
    r = Reduction.begin(cwnd=10, ssthresh=7)
    assert r.on_ack(in_flight=9, newly_acked_sacked=1, newly_lost=1,
                    snd_una_advanced=False) == 10
    # nothing sent yet and the share rounds to 0: one segment anyway
    r2 = Reduction.begin(cwnd=100, ssthresh=1)
    assert r2.on_ack(in_flight=99, newly_acked_sacked=1, newly_lost=0,
                     snd_una_advanced=False) == 100


def test_proportional_part_spreads_the_reduction_over_a_round_trip() -> None:
    """Above ssthresh, over one window of ACKs PRR sends ssthresh/prior_cwnd of what is
    delivered: 10 delivered with prior_cwnd 10 and ssthresh 5 lets out exactly 5."""
    r = Reduction.begin(cwnd=10, ssthresh=5)
    in_flight, sent = 10, 0
    for _ in range(10):
        in_flight -= 1
        cwnd = r.on_ack(in_flight, 1, 0, snd_una_advanced=True)
        assert cwnd is not None
        send = max(0, cwnd - in_flight)
        r.sent(send)
        sent += send
        in_flight += send
    assert sent == 5 and in_flight == 5


def test_conservation_below_ssthresh_and_the_slow_start_variant() -> None:
    r = Reduction(ssthresh=10, prior_cwnd=20, delivered=10, out=10)
    # 4 in flight, 2 delivered, a loss on this ACK: send what was delivered (PRR-CRB)
    assert r.on_ack(in_flight=4, newly_acked_sacked=2, newly_lost=1,
                    snd_una_advanced=True) == 6
    r.sent(2)
    # a safe ACK (SND.UNA advanced, no new loss): one more (PRR-SSRB)
    assert r.on_ack(in_flight=4, newly_acked_sacked=2, newly_lost=0,
                    snd_una_advanced=True) == 4 + 3
    r.sent(3)
    # never beyond ssthresh
    assert r.on_ack(in_flight=9, newly_acked_sacked=5, newly_lost=0,
                    snd_una_advanced=True) == 10


def test_byte_units_add_one_mss() -> None:
    assert prr.sndcnt(ssthresh=10000, prior_cwnd=20000, prr_delivered=3000, prr_out=3000,
                      in_flight=4000, newly_acked_sacked=1000, newly_lost=0,
                      snd_una_advanced=True, mss=1000) == 2000


def test_an_ack_that_delivers_nothing_leaves_cwnd() -> None:
    r = Reduction.begin(cwnd=10, ssthresh=5)
    assert r.on_ack(10, 0, 0, False) is None and r.delivered == 0


@settings(max_examples=300, deadline=None)
@given(prior=st.integers(2, 200), ratio=st.floats(0.3, 0.9),
       acks=st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=60))
def test_prr_never_sends_more_than_ssthresh_allows(prior: int, ratio: float,
                                                   acks: list[tuple[int, bool]]) -> None:
    """Whatever the ACK pattern, after the first ACK the data in flight never exceeds
    max(ssthresh, what it was), and the total sent above ssthresh stays within the
    proportional share plus the forced first segment (RFC 9937 §5's property)."""
    ssthresh = max(1, int(prior * ratio))
    r = Reduction.begin(cwnd=prior, ssthresh=ssthresh)
    in_flight = prior
    for delivered, lost in acks:
        delivered = min(delivered, in_flight)
        if not delivered:
            break
        in_flight -= delivered
        cwnd = r.on_ack(in_flight, delivered, int(lost), snd_una_advanced=not lost)
        assert cwnd is not None
        send = max(0, cwnd - in_flight)
        r.sent(send)
        in_flight += send
        assert in_flight <= max(ssthresh, prior)
        if in_flight > ssthresh:
            assert r.out <= -(-ssthresh * r.delivered // prior) + 1


def test_end_of_the_episode() -> None:
    assert prr.cwnd_at_end(3, 7, CaState.CWR, undo_marker=False) == 7
    assert prr.cwnd_at_end(3, 7, CaState.RECOVERY, undo_marker=True) == 7
    assert prr.cwnd_at_end(12, 7, CaState.RECOVERY, undo_marker=False) == 12  # undone
    assert prr.cwnd_at_end(3, prr.INFINITE_SSTHRESH, CaState.CWR, False) == 3
    assert prr.cwnd_at_end(3, 7, CaState.CWR, False, cong_control=True) == 3


def test_cwr_entry_and_exit() -> None:
    assert prr.enters_cwr(CaState.OPEN) and prr.enters_cwr(CaState.DISORDER)
    assert not any(prr.enters_cwr(s) for s in (CaState.CWR, CaState.RECOVERY, CaState.LOSS))
    assert not prr.cwr_ends(CaState.CWR, snd_una=100, high_seq=100)  # CWR must be ACKed
    assert prr.cwr_ends(CaState.CWR, snd_una=101, high_seq=100)
    assert not prr.cwr_ends(CaState.CWR, snd_una=99, high_seq=100)
    assert prr.cwr_ends(CaState.CWR, snd_una=5, high_seq=0xFFFFFFF0)  # wraps
    assert not prr.cwr_ends(CaState.RECOVERY, snd_una=101, high_seq=100)
