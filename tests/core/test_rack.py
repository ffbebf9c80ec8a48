"""RACK-TLP (RFC 8985) as Linux's tcp_recovery.c and TLP code decide: time-based loss
marking, the reordering window and its DSACK adaptation, the probe's schedule and what
its ACK means."""

from __future__ import annotations

from rcunet.core.tcp import rack
from rcunet.core.tcp.prr import CaState
from rcunet.core.tcp.rack import Probe, RackState, Segment, TlpAck

MS = 1000  # µs


def _window(state: RackState, **kw: object) -> int:
    args: dict[str, object] = dict(reord_seen=True, ca_state=CaState.OPEN, sacked_out=0,
                                   reordering=3, min_rtt_us=40 * MS, srtt_us=50 * MS)
    args.update(kw)
    return state.reo_wnd(**args)


def test_advance_keeps_the_latest_sent_delivered_segment() -> None:
    r = RackState()
    r.advance(xmit_time=100 * MS, end_seq=2000, now=150 * MS, retransmitted=False,
              min_rtt_us=40 * MS)
    assert (r.xmit_time, r.end_seq, r.rtt_us, r.advanced) == (100 * MS, 2000, 50 * MS, True)
    r.advance(90 * MS, 1000, 160 * MS, False, 40 * MS)  # sent earlier: rtt only
    assert (r.xmit_time, r.end_seq, r.rtt_us) == (100 * MS, 2000, 70 * MS)
    r.advance(100 * MS, 3000, 160 * MS, False, 40 * MS)  # same burst, later seq
    assert r.end_seq == 3000
    # a retransmission ACKed within min_rtt of its resend is ambiguous: ignored
    r.advanced = False
    r.advance(150 * MS, 1000, 170 * MS, True, 40 * MS)
    assert not r.advanced and r.xmit_time == 100 * MS


def test_segments_sent_before_are_lost_after_rtt_plus_window() -> None:
    r = RackState(xmit_time=30 * MS, end_seq=4000, rtt_us=50 * MS, advanced=True)
    segs = [Segment(10 * MS, 1000), Segment(20 * MS, 2000),
            Segment(25 * MS, 3000, lost_unretransmitted=True), Segment(30 * MS, 4000),
            Segment(40 * MS, 5000)]
    # now 70 ms, window 5 ms: the first waited 60 >= 55 (lost), the second 50 < 55
    got = rack.mark_lost(r, segs, now=70 * MS, reo_wnd=5 * MS)
    assert got.lost == (0,)
    assert got.reo_timer == 5 * MS + rack.TIMEOUT_MIN_US
    assert not r.advanced
    assert rack.mark_lost(r, segs, now=200 * MS, reo_wnd=0) == ((), None)  # not advanced
    later = rack.detect_loss(r, segs, now=200 * MS, reo_wnd=5 * MS)
    assert later == ((0, 1), 0)  # stops at the RACK segment itself


def test_a_burst_mate_sent_after_the_rtt_segment_is_not_lost_at_exactly_rack_rtt() -> None:
    """One burst shares a timestamp on the virtual clock; Linux stamps each segment a
    little later.  The segment that gave RACK.rtt (1000-2000, sent at 10 ms) went out
    before 3000-4000 in the burst, so at exactly RACK.rtt after the burst that one has
    waited a little less in Linux: not lost yet.  One sent before it in the burst is."""
    r = RackState()
    r.advance(xmit_time=20 * MS, end_seq=500, now=32 * MS, retransmitted=True,
              min_rtt_us=10 * MS)  # a resent head: the latest sent, RTT 12 ms
    r.advance(xmit_time=10 * MS, end_seq=2000, now=32 * MS, retransmitted=False,
              min_rtt_us=10 * MS)  # an original after it in sequence: RACK.rtt 22 ms
    assert (r.xmit_time, r.rtt_us) == (20 * MS, 22 * MS)
    segs = [Segment(10 * MS, 1000), Segment(10 * MS, 4000)]
    assert rack.detect_loss(r, segs, now=32 * MS, reo_wnd=0) == ((0,), 1)
    assert rack.detect_loss(r, segs, now=33 * MS, reo_wnd=0) == ((0, 1), 0)


def test_reordering_window() -> None:
    r = RackState()
    assert _window(r) == 10 * MS                          # min_rtt / 4
    assert _window(r, reord_seen=False) == 10 * MS        # below the dupack threshold
    assert _window(r, reord_seen=False, sacked_out=3) == 0
    assert _window(r, reord_seen=False, sacked_out=3,
                   tcp_recovery=rack.RACK_LOSS_DETECTION | rack.RACK_NO_DUPTHRESH) == 10 * MS
    assert _window(r, reord_seen=False, ca_state=CaState.RECOVERY) == 0
    r.reo_wnd_steps = 9
    assert _window(r) == 50 * MS                          # capped at SRTT


def test_dsack_widens_the_window_once_per_round_trip_then_it_decays() -> None:
    r = RackState(dsack_seen=True)
    r.update_reo_wnd(prior_delivered=10, delivered=20)
    assert (r.reo_wnd_steps, r.last_delivered, r.reo_wnd_persist) == (2, 20, 16)
    r.dsack_seen = True
    r.update_reo_wnd(prior_delivered=15, delivered=25)   # within the same round trip
    assert r.reo_wnd_steps == 2 and not r.dsack_seen
    r.dsack_seen = True
    r.update_reo_wnd(prior_delivered=20, delivered=30)
    assert r.reo_wnd_steps == 3
    for _ in range(16):
        r.recovery_not_undone()
    r.update_reo_wnd(prior_delivered=40, delivered=50)
    assert r.reo_wnd_steps == 1
    static = RackState(dsack_seen=True)
    static.update_reo_wnd(10, 20, tcp_recovery=rack.RACK_STATIC_REO_WND)
    assert static.reo_wnd_steps == 1
    r.dsack_undo()
    assert r.reo_wnd_persist == 1


def test_dsack_blocks_and_floods() -> None:
    kw = dict(max_window=65535, mss=1000, tlp_high_seq=0, dsack_dups=0, total_retrans=5,
              reord_seen=True)
    assert rack.dsack_seen(1000, 3000, **kw) == (2, False, True, "")
    assert rack.dsack_seen(3000, 1000, **kw).ignored == "empty"
    assert rack.dsack_seen(0, 70000, **kw).ignored == "beyond-window"
    flood = dict(kw, dsack_dups=5)
    assert rack.dsack_seen(1000, 2000, **flood).ignored == "more-than-retransmitted"
    tlp = dict(kw, tlp_high_seq=2000)
    assert rack.dsack_seen(1500, 2000, **tlp) == (1, True, False, "")
    calm = dict(kw, reord_seen=False)
    assert not rack.dsack_seen(1000, 2000, **calm).widens_reo_wnd
    assert rack.dsack_seen(0xFFFFFF00, 0x100, **kw).dup_segs == 1


def test_probe_is_scheduled_only_in_open_or_cwr_with_sack() -> None:
    ok = dict(early_retrans=3, packets_out=2, sack=True, ca_state=CaState.OPEN)
    assert rack.may_schedule_probe(**ok)
    assert rack.may_schedule_probe(**dict(ok, ca_state=CaState.CWR))
    for bad in (dict(early_retrans=2), dict(packets_out=0), dict(sack=False),
                dict(ca_state=CaState.RECOVERY), dict(ca_state=CaState.LOSS),
                dict(fastopen_pending=True)):
        assert not rack.may_schedule_probe(**dict(ok, **bad))


def test_probe_timeout() -> None:
    assert rack.probe_timeout(srtt_us=10 * MS, packets_out=3, rto_min_us=200 * MS,
                              rto_remaining_us=500 * MS) == 22 * MS
    # one segment out: its ACK may be delayed, wait the minimum RTO on top
    assert rack.probe_timeout(srtt_us=10 * MS, packets_out=1, rto_min_us=200 * MS,
                              rto_remaining_us=500 * MS) == 220 * MS
    assert rack.probe_timeout(srtt_us=0, packets_out=1, rto_min_us=200 * MS,
                              rto_remaining_us=3_000 * MS) == 1_000 * MS
    assert rack.probe_timeout(srtt_us=10 * MS, packets_out=3, rto_min_us=200 * MS,
                              rto_remaining_us=15 * MS) == 15 * MS  # never after the RTO


def test_probe_action_and_its_ack() -> None:
    assert rack.probe_action(tlp_high_seq=500, new_data_fits=True) is Probe.REARM
    assert rack.probe_action(tlp_high_seq=0, new_data_fits=True) is Probe.NEW_DATA
    assert rack.probe_action(tlp_high_seq=0, new_data_fits=False) is Probe.RETRANSMIT_LAST
    base = dict(tlp_high_seq=5000, tlp_retrans=True, dsack_tlp=False,
                snd_una_advanced=False, not_dup=False, data_sacked=False)
    assert rack.tlp_ack(4000, **base) is TlpAck.PENDING
    assert rack.tlp_ack(5000, **dict(base, tlp_retrans=False)) is TlpAck.NO_LOSS
    assert rack.tlp_ack(5000, **dict(base, dsack_tlp=True)) is TlpAck.NO_LOSS
    assert rack.tlp_ack(6000, **base) is TlpAck.LOSS
    assert rack.tlp_ack(5000, **base) is TlpAck.NO_LOSS
    assert rack.tlp_ack(5000, **dict(base, data_sacked=True)) is TlpAck.PENDING
