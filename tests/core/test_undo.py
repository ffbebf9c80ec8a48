"""Undo of an unneeded cwnd reduction and F-RTO (RFC 5682) as Linux decides them:
tcp_packet_delayed, tcp_may_undo, tcp_try_undo_dsack, tcp_undo_cwnd_reduction,
tcp_enter_loss's F-RTO arming and tcp_process_loss."""

from __future__ import annotations

from rcunet.core.tcp import undo
from rcunet.core.tcp.prr import CaState
from rcunet.core.tcp.undo import LossStep


def test_timestamps_tell_a_delayed_packet_from_a_lost_one() -> None:
    base = dict(retrans_stamp=1000, sack=True, snd_una=5000, high_seq=9000)
    assert undo.packet_delayed(tsecr=999, **base)       # echo of the original
    assert not undo.packet_delayed(tsecr=1000, **base)  # echo of the retransmission
    assert not undo.packet_delayed(tsecr=None, **base)  # no timestamps: cannot tell
    assert not undo.packet_delayed(tsecr=0, **base)
    assert undo.packet_delayed(tsecr=0xFFFFFFF0, retrans_stamp=5, sack=True, snd_una=0,
                               high_seq=1)              # before, across the wrap
    # nothing retransmitted yet: delayed, except where Linux cleared retrans_stamp
    assert undo.packet_delayed(retrans_stamp=0, tsecr=None, sack=True, snd_una=9000,
                               high_seq=9000)
    assert not undo.packet_delayed(retrans_stamp=0, tsecr=None, sack=False, snd_una=9000,
                                   high_seq=9000)
    assert not undo.packet_delayed(retrans_stamp=0, tsecr=None, sack=True, snd_una=1,
                                   high_seq=9, syn_sent=True)


def test_may_undo_and_dsack_undo() -> None:
    assert undo.may_undo(undo_marker=100, undo_retrans=0, delayed=False)
    assert undo.may_undo(undo_marker=100, undo_retrans=2, delayed=True)
    assert not undo.may_undo(undo_marker=100, undo_retrans=2, delayed=False)
    assert not undo.may_undo(undo_marker=0, undo_retrans=0, delayed=True)
    assert undo.dsack_undo(undo_marker=100, undo_retrans=0)
    assert not undo.dsack_undo(undo_marker=100, undo_retrans=1)


def test_undo_restores_cwnd_and_ssthresh() -> None:
    assert undo.undo_reduction(cwnd=7, ssthresh=7, prior_ssthresh=0x7FFFFFFF,
                               prior_cwnd=10) == (10, 0x7FFFFFFF, True)
    assert undo.undo_reduction(cwnd=12, ssthresh=7, prior_ssthresh=5,
                               prior_cwnd=10) == (12, 7, False)
    # an ECN reduction (prior_ssthresh 0) is proven congestion: nothing to undo
    assert undo.undo_reduction(cwnd=7, ssthresh=7, prior_ssthresh=0,
                               prior_cwnd=10) == (7, 7, False)


def test_frto_is_armed_for_a_first_or_repeated_rto() -> None:
    assert undo.frto_armed(tcp_frto=True, ca_state=CaState.OPEN, retransmits=0)
    assert undo.frto_armed(tcp_frto=True, ca_state=CaState.CWR, retransmits=0)
    assert not undo.frto_armed(tcp_frto=True, ca_state=CaState.RECOVERY, retransmits=0)
    assert undo.frto_armed(tcp_frto=True, ca_state=CaState.LOSS, retransmits=2)
    assert not undo.frto_armed(tcp_frto=False, ca_state=CaState.OPEN, retransmits=0)
    assert not undo.frto_armed(tcp_frto=True, ca_state=CaState.OPEN, retransmits=0,
                               mtu_probing=True)


def _loss(**kw: object) -> undo.LossDecision:
    args: dict[str, object] = dict(frto=True, snd_una=1000, snd_nxt=5000, high_seq=5000,
                                   snd_una_advanced=True, may_undo_now=False,
                                   orig_sack_acked=False, data_sacked=False, dupack=False,
                                   can_send_new=True)
    args.update(kw)
    return undo.loss_ack(**args)


def test_frto_steps() -> None:
    # step 2.b: the first ACK after the RTO advances: send new data, move high_seq
    assert _loss() == (LossStep.SEND_NEW, True, True)
    assert _loss(can_send_new=False) == (LossStep.RETRANSMIT_LOST, False, True)
    # step 3.b: then an ACK covering never-retransmitted data: the RTO was spurious
    assert _loss(snd_nxt=7000, orig_sack_acked=True).step is LossStep.SPURIOUS_RTO
    # step 3.a: a duplicate ACK or a SACK instead: the loss was real
    assert _loss(snd_nxt=7000, dupack=True) == (LossStep.RETRANSMIT_LOST, False, False)
    assert _loss(snd_nxt=7000, data_sacked=True).frto is False


def test_loss_state_without_frto() -> None:
    assert _loss(frto=False) == (LossStep.RETRANSMIT_LOST, False, False)
    assert _loss(frto=False, snd_una=5000).step is LossStep.RECOVERED
    assert _loss(may_undo_now=True).step is LossStep.UNDO  # timestamps showed a delay
    assert _loss(may_undo_now=True, snd_una_advanced=False).step is not LossStep.UNDO
