"""Segment arrival (RFC 9293 §3.10.7), step by step: SYN-SENT, then the synchronized
states' first (acceptability, PAWS) to eighth (FIN) checks, the fifth step's ACK
processing, and in-order delivery with the out-of-order queue; plus header prediction
(``_fast_path``), which skips work but calls the same rules."""

from __future__ import annotations

import errno as errnos

from rcunet.core.tcp.chrono import BUSY, SNDBUF_LIMITED
from rcunet.core.tcp.common import (
    ACK,
    CLOSE_WAIT,
    CLOSED,
    CLOSING,
    ESTABLISHED,
    FIN,
    FIN_WAIT_1,
    FIN_WAIT_2,
    HALF32,
    LAST_ACK,
    LISTEN,
    MASK32,
    MS,
    PAWS_IDLE_LIMIT,
    PAWS_WINDOW,
    PSH,
    RST,
    SYN,
    SYN_RECEIVED,
    SYN_SENT,
    TIME_WAIT,
)
from rcunet.core.tcp.events import (
    ResetReceived,
    SendSpaceAvailable,
)
from rcunet.core.tcp.fastopen import syn_cookie
from rcunet.core.tcp.listen import (
    reset_for,
    seg_len,
)
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, ge, gt, le, lt, sub


class InputMixin:
    """``Connection``'s input (RFC 9293 §3.10.7)."""

    __slots__ = ()

    def on_segment(self, seg: tcp.Repr, now: int) -> None:
        """Process one segment addressed to this connection (RFC 9293 §3.10.7)."""
        self._now = now
        values = self.counters.values  # counters.add("TcpInSegs"), inlined: every segment
        values["TcpInSegs"] = values["TcpInSegs"] + 1 if "TcpInSegs" in values else 1
        if seg.checksum_ok is False:
            self.counters.add("TcpInErrs")
            self.counters.add("TcpInCsumErrors")
            return
        st = self.state
        if st is ESTABLISHED and self._fast_path(seg, now):
            self._output(now)  # header prediction took it: no walk of the state machine
            return
        if st is CLOSED:
            reply = reset_for(seg)  # §3.10.7.1
            if reply is not None:
                self._emit(reply)
                self.counters.add("TcpOutRsts")
        elif st is SYN_SENT:
            self._input_syn_sent(seg, now)
        elif st is not LISTEN:
            self._input_synchronized(seg, now)
        self._output(now)

    def _fast_path(self, seg: tcp.Repr, now: int) -> bool:
        """Header prediction (Van Jacobson; Linux tcp_rcv_established): in ESTABLISHED, a
        segment carrying the next expected bytes and an ACK for new data (or data with an
        ACK that changes nothing), with nothing unusual about it or about us, needs only
        the ACK bookkeeping and the in-order delivery of §3.10.7.4.  Returns False,
        having changed nothing, when the full path must run.

        What qualifies: ACK and at most PSH; SEG.SEQ = RCV.NXT; no SACK blocks; the
        timestamp (if both use them) not older than TS.Recent, so PAWS passes; SND.UNA =<
        SEG.ACK =< SND.MAX; a payload that fits the window; and no recovery, duplicate
        ACKs, SACK scoreboard, out-of-order queue, pending FIN or close() on our side.  A
        pure ACK that acknowledges nothing new goes the full way (it may be a duplicate).
        """
        t = self.tcb
        flags = seg.flags
        if flags & ~PSH != ACK or seg.seq != t.rcv_nxt or seg.sack_blocks:
            return False
        ack = seg.ack
        new_ack = ack != t.snd_una
        payload = seg.payload
        if ((not new_ack and not payload) or not self.loss.idle()
                or self.receiver.fin_offset is not None or self._orphaned or len(self.receiver.ofo)
                or self.sender.fin_queued):
            return False
        # Sequence arithmetic inlined, as everywhere on this path (see HALF32):
        # lt(a, b) is (a - b) & MASK32 >= HALF32, le(a, b) is a == b or lt(a, b).
        snd_una, snd_max = t.snd_una, t.snd_max
        if new_ack and not ((snd_una - ack) & MASK32 >= HALF32
                            and (ack == snd_max or (ack - snd_max) & MASK32 >= HALF32)):
            return False
        ts = seg.timestamp
        if t.ts_ok and (ts is None or (ts[0] - t.ts_recent) & MASK32 >= HALF32):
            return False
        if payload and len(payload) > t.rcv_wnd:
            return False
        self.timers.heard_from_peer(now)
        if new_ack:
            acked = ((ack - snd_una + HALF32) & MASK32) - HALF32  # sub
            self._ack_advance(seg, now)
            self.sender.grow_cwnd(self, acked, now)
        self._update_send_window(seg, ack)  # SND.UNA =< SEG.ACK: checked above
        if ts is not None:
            self._update_ts_recent(seg, now)
        if payload:
            data = memoryview(payload)
            t.rcv_mss = max(t.rcv_mss, min(len(data), self.options.mss))
            self.autotune.rtt_measure(seg, len(data), now)
            self.receiver.deliver_in_order(self, data, bool(flags & PSH), now)
        return True

    def _input_syn_sent(self, seg: tcp.Repr, now: int) -> None:
        """RFC 9293 §3.10.7.3 (SYN-SENT), with RFC 5961 §3.2's RST rule."""
        t = self.tcb
        flags = seg.flags
        if flags & ACK:
            # first: "If SEG.ACK =< ISS or SEG.ACK > SND.NXT, send a reset (unless RST)"
            bad = le(seg.ack, t.iss) or gt(seg.ack, t.snd_max)
            if not bad and not flags & RST and self._synack_tsecr_invalid(seg, now):
                # Linux: a TSecr we never sent marks an old or forged SYN,ACK.
                self.counters.add("TcpExtPAWSActive")
                bad = True
            if bad:
                if not flags & RST:
                    self._emit(tcp.Repr(src_port=self.local_port, dst_port=self.remote_port,
                                        seq=seg.ack, ack=0, flags=RST, window=0))
                    self.counters.add("TcpOutRsts")
                return
        if flags & RST:
            # second: only a RST that acknowledges our SYN is acceptable (RFC 5961 §3.2)
            if flags & ACK:
                self.counters.add("TcpAttemptFails")
                self._events.append(ResetReceived())
                self._fail(errnos.ECONNREFUSED)
            return
        if not flags & SYN:
            return  # fifth: "drop the segment and return"
        if (not flags & ACK and t.ts_recent_stamp is not None and seg.timestamp is not None
                and self._paws_reject(seg, now)):
            # PAWS against a TS.Recent inherited from TIME-WAIT: Linux
            # tcp_rcv_synsent_state_process checks it for a bare SYN only (simultaneous
            # open); a SYN,ACK's TSecr was validated above, its TSval is the new peer's.
            return
        self._take_peer_syn(seg, now)
        if flags & ACK:
            self._rtt_sample_handshake(seg, now)
            if self.fastopen_active is not None:
                self._fastopen_synack(seg)
            t.snd_una = seg.ack
            self._set_state(ESTABLISHED)
            self._on_established(now)
            self.receiver.process_text_and_fin(self, seg, add(seg.seq, 1), now)
            # tcp_rcv_synsent_state_process ends with tcp_send_ack: the handshake's ACK goes
            # at once, even when the SYN-ACK carried data (and a FIN) that would
            # otherwise wait for the delayed-ACK timer (tcp_fastopen_add_skb)
            if self.state is not CLOSED:
                self.receiver.ack_at_once()
        else:
            # Simultaneous open: "enter SYN-RECEIVED, form a SYN,ACK segment and send it".
            # Text in the SYN is dropped (the peer retransmits it once synchronized).
            self._set_state(SYN_RECEIVED)
            self._send_syn(now)

    def _fastopen_synack(self, seg: tcp.Repr) -> None:
        """Linux tcp_rcv_fastopen_synack: note the SYN-ACK's cookie (only if we sent the
        option) and MSS for the host's cookie cache, and take the SYN data it
        acknowledged off the send queue; the rest goes again once the connection is
        open (tcp_non_congestion_loss_retransmit)."""
        fo = self.fastopen_active
        assert fo is not None
        t = self.tcb
        fo.answered = True
        fo.peer_mss = seg.mss
        fo.retransmitted = self.timers.syn_retransmitted
        found = syn_cookie(seg.unknown_options) if fo.option_sent else None
        fo.cookie = found if found is not None and found.value else None
        acked = min(max(sub(seg.ack, add(t.iss, 1)), 0), fo.data_len)
        fo.data_acked = acked
        self.sender.syn_data_acked(acked)
        if fo.data_len:
            if acked == fo.data_len:
                self.syn_data_acked = True
                self.counters.add("TcpExtTCPFastOpenActive")
            else:
                self.counters.add("TcpExtTCPFastOpenActiveFail")

    def _synack_tsecr_invalid(self, seg: tcp.Repr, now: int) -> bool:
        """TSecr of a SYN,ACK must echo a TSval we sent since our first SYN."""
        if not self.options.timestamps or seg.timestamp is None or not seg.timestamp[1]:
            return False
        sent_at = self.timers.syn_sent_at
        first = self.tcb.ts_val(sent_at if sent_at is not None else now)
        tsecr = seg.timestamp[1]
        return not (ge(tsecr, first) and le(tsecr, self.tcb.ts_val(now)))

    def _input_synchronized(self, seg: tcp.Repr, now: int) -> None:
        """RFC 9293 §3.10.7.4: SYN-RECEIVED and every synchronized state."""
        t = self.tcb
        flags = seg.flags
        length = seg_len(seg)
        # RFC 7323 §5.3 R1: PAWS, before the sequence check.
        if (t.ts_ok and seg.timestamp is not None and not flags & RST
                and self._paws_discard(seg, now)):
            self.counters.add("TcpExtPAWSEstab")
            if self.challenges.dupack(self.options, seg, now, "TcpExtTCPACKSkippedPAWS"):
                self.receiver.ack_at_once()
            return
        if self._is_simultaneous_open_synack(seg):
            # Linux tcp_validate_incoming: in a simultaneous open the peer's SYN,ACK
            # repeats its SYN (not acceptable by the §3.10.7.4 table) but its ACK
            # completes the handshake; take the ACK, skip the challenge.
            seg = seg._replace(seq=add(seg.seq, 1), flags=flags & ~SYN)
            flags, length = seg.flags, seg_len(seg)
        if self.state is SYN_RECEIVED and flags & (SYN | ACK) == SYN and seg.seq == t.irs:
            # The peer retransmitted its SYN: so do we, rate limited (Linux tcp_check_req).
            if not self.challenges.rate_limited(self.options, now, "TcpExtTCPACKSkippedSynRecv"):
                self._send_syn(now, retransmit=True, rearm=False)
            return
        # first: sequence number check
        if not self.receiver.acceptable(self, seg.seq, length):
            if not flags & (RST | SYN) and self.receiver.after_window(seg.seq):
                self.counters.add("TcpExtBeyondWindow")  # tcp_sequence: INVALID_SEQUENCE
            if flags & RST:
                if self._rst_after_fin(seg):
                    self._on_reset()
                return  # "If the RST bit is set ... drop the segment and return"
            if flags & FIN and self.state is TIME_WAIT:
                # RFC 9293 §3.10.7.4 TIME-WAIT: a retransmitted FIN is ACKed and restarts 2MSL.
                self.timers.time_wait_at = now + self.options.time_wait_timeout
            if flags & SYN:
                # RFC 5961 §4.2, whatever the seq
                if self.challenges.challenge(self.options, now, syn=True):
                    self.receiver.ack_at_once()
                return
            if seg.payload and lt(seg.seq, t.rcv_nxt):
                # old data: our ACK was lost; D-SACK it and ACK quickly (tcp_send_dupack)
                self.delack.enter_quickack_mode(self.options)
                end = add(seg.seq, len(seg.payload))
                self.receiver.note_dsack(seg.seq, end if lt(end, t.rcv_nxt) else t.rcv_nxt)
            if self.challenges.dupack(self.options, seg, now, "TcpExtTCPACKSkippedSeq"):
                self.receiver.ack_at_once()
            return
        if self.receiver.end_beyond_window(seg, length):
            # Linux tcp_sequence (INVALID_END_SEQUENCE): a segment whose end passes the
            # window is dropped whole, ACK included, unless the receive queue is empty.
            if not flags & RST:
                if flags & SYN:
                    if self.challenges.challenge(self.options, now, syn=True):
                        self.receiver.ack_at_once()
                    return
                self.counters.add("TcpExtBeyondWindow")
                if self.challenges.dupack(self.options, seg, now, "TcpExtTCPACKSkippedSeq"):
                    self.receiver.ack_at_once()
            return
        # second: RST (RFC 5961 §3.2)
        if flags & RST:
            if seg.seq == t.rcv_nxt:
                self._on_reset()
            else:
                if self.challenges.challenge(self.options, now):
                    self.receiver.ack_at_once()
            return
        # fourth: SYN (RFC 5961 §4.2)
        if flags & SYN:
            if self.challenges.challenge(self.options, now, syn=True):
                self.receiver.ack_at_once()
            return
        # fifth: ACK
        if not flags & ACK:
            return
        self.timers.heard_from_peer(now)
        if self.state is SYN_RECEIVED:
            if not (lt(t.snd_una, seg.ack) and le(seg.ack, t.snd_max)):
                self._emit(tcp.Repr(src_port=self.local_port, dst_port=self.remote_port,
                                    seq=seg.ack, ack=0, flags=RST, window=0))
                self.counters.add("TcpOutRsts")
                return
            self._rtt_sample_handshake(seg, now)
            if self.fastopen_child and gt(seg.ack, add(t.iss, 1)):
                # it also acknowledges data a Fast Open child sent in SYN-RECEIVED
                t.snd_una = add(t.iss, 1)
                self._ack_advance(seg, now)
            t.snd_una = seg.ack
            t.snd_wnd = seg.window << t.snd_wscale
            t.max_snd_wnd = max(t.max_snd_wnd, t.snd_wnd)
            t.snd_wl1, t.snd_wl2 = seg.seq, seg.ack
            self._set_state(ESTABLISHED)
            self._on_established(now)
        elif not self._process_ack(seg, now):
            return
        if self.state is CLOSED:
            return
        self._update_ts_recent(seg, now)
        # sixth (URG) is not implemented: urgent data is delivered inline, as RFC 6093 advises.
        self.receiver.process_text_and_fin(self, seg, seg.seq, now)

    def _rst_after_fin(self, seg: tcp.Repr) -> bool:
        """Linux tcp_reset_check: once the peer's FIN is in, a RST at RCV.NXT-1 counts too."""
        return (self.state in (CLOSE_WAIT, CLOSING, LAST_ACK)
                and seg.seq == (self.tcb.rcv_nxt - 1) & MASK32)

    def _is_simultaneous_open_synack(self, seg: tcp.Repr) -> bool:
        t = self.tcb
        return (self.state is SYN_RECEIVED and not self.passive
                and seg.flags & (SYN | ACK | RST | FIN) == SYN | ACK and not seg.payload
                and add(seg.seq, 1) == t.rcv_nxt and seg.ack == t.snd_nxt)

    def _paws_reject(self, seg: tcp.Repr, now: int, window: int = 0) -> bool:
        """RFC 7323 §5.3 R1: TSval older than TS.Recent (unless TS.Recent went stale, §5.5).

        Linux tcp_paws_check: ``window`` ticks of slack, and no check while TS.Recent is 0.
        """
        t = self.tcb
        assert seg.timestamp is not None
        if t.ts_recent_stamp is not None and now - t.ts_recent_stamp > PAWS_IDLE_LIMIT:
            return False
        return t.ts_recent != 0 and sub(t.ts_recent, seg.timestamp[0]) > window

    def _paws_discard(self, seg: tcp.Repr, now: int) -> bool:
        """Linux tcp_paws_discard: PAWS with one tick of slack, sparing "disordered" ACKs.

        A pure duplicate ACK that changes nothing and is at most one RTO older than
        TS.Recent is a reordered ACK, not an old duplicate: dropping it would only lose
        a dupack (Linux tcp_disordered_ack).
        """
        if not self._paws_reject(seg, now, window=PAWS_WINDOW):
            return False
        t = self.tcb
        assert seg.timestamp is not None
        disordered = (seg.flags & (ACK | SYN | FIN | RST) == ACK and not seg.payload
                      and seg.seq == t.rcv_nxt and seg.ack == t.snd_una
                      and not self._may_update_window(seg)
                      and sub(t.ts_recent, seg.timestamp[0]) <= self.rto.rto // MS)
        return not disordered

    def _may_update_window(self, seg: tcp.Repr) -> bool:
        """Linux tcp_may_update_window: would this ACK change SND.WND?"""
        t = self.tcb
        window = seg.window << t.snd_wscale
        return (gt(seg.ack, t.snd_una) or gt(seg.seq, t.snd_wl1)
                or (seg.seq == t.snd_wl1 and (window > t.snd_wnd or window == 0)))

    def _update_ts_recent(self, seg: tcp.Repr, now: int) -> None:
        """RFC 7323 §4.3 (2): TSval >= TS.Recent and SEG.SEQ =< Last.ACK.sent.

        Done only once the segment passed the RST, SYN and ACK checks, as Linux does
        (tcp_replace_ts_recent), so a rejected segment cannot move TS.Recent.
        """
        t = self.tcb
        ts = seg.timestamp
        if ts is None or not t.ts_ok:
            return
        tsval, seq, last, recent = ts[0], seg.seq, t.last_ack_sent, t.ts_recent
        # ge(tsval, recent) and le(seq, last), inlined (see HALF32): header prediction
        # calls this for every segment
        if (tsval == recent or (recent - tsval) & MASK32 >= HALF32) and (
                seq == last or (seq - last) & MASK32 >= HALF32):
            t.ts_recent, t.ts_recent_stamp = tsval, now

    def _on_reset(self) -> None:
        """An acceptable RST: errno by state as Linux's tcp_reset."""
        st = self.state
        self._events.append(ResetReceived())
        if st in (ESTABLISHED, CLOSE_WAIT):
            self.counters.add("TcpEstabResets")
        if st is SYN_RECEIVED and self.passive and not self.fastopen_child:
            self._enter_closed()  # RFC 9293: "return this connection to LISTEN"
        elif st is SYN_RECEIVED and not self.fastopen_child:
            self._fail(errnos.ECONNREFUSED)  # an active open (simultaneous)
        elif st is CLOSE_WAIT:
            self._fail(errnos.EPIPE)
        elif st in (CLOSING, LAST_ACK, TIME_WAIT):
            self._enter_closed()
        else:
            self._fail(errnos.ECONNRESET)

    def _process_ack(self, seg: tcp.Repr, now: int) -> bool:
        """RFC 9293 §3.10.7.4 fifth with RFC 5961 §5.2's range; False drops the segment."""
        t = self.tcb
        ack = seg.ack
        if gt(ack, t.snd_max):
            # "If the ACK acks something not yet sent ... send an ACK, drop the segment".
            # Linux: tcp_ack returns TCP_ACK_UNSENT_DATA; tcp_rcv_state_process answers
            # it with a challenge ACK, but tcp_rcv_established (ESTABLISHED) drops the
            # segment silently.
            if self.state is not ESTABLISHED:
                if self.challenges.challenge(self.options, now):
                    self.receiver.ack_at_once()
            return False
        if lt(ack, (t.snd_una - t.max_snd_wnd) & MASK32):
            # RFC 5961 §5.2: older than SND.UNA - MAX.SND.WND
            if self.challenges.challenge(self.options, now):
                self.receiver.ack_at_once()
            return False
        prior_wnd = t.snd_wnd
        new_ack = gt(ack, t.snd_una)
        acked = sub(ack, t.snd_una) if new_ack else 0
        if new_ack:
            self._ack_advance(seg, now)
        if le(t.snd_una, ack):
            self._update_send_window(seg, ack)
        loss = self.loss
        newly_sacked = loss.take_sack(seg)
        if new_ack and loss.algorithm is None:
            self.sender.grow_cwnd(self, acked, now)
        loss.detect(self, seg, ack, new_ack, acked, prior_wnd, newly_sacked, now)
        # state-specific ACK handling
        st = self.state
        if self.sender.fin_acked():
            if st is FIN_WAIT_1:
                self._set_state(FIN_WAIT_2)
                if self._orphaned:
                    self.timers.fin_wait2_at = now + self.options.fin_timeout
            elif st is CLOSING:
                self._enter_time_wait(now)
            elif st is LAST_ACK:
                self._enter_closed()
                return False
        return True

    def _update_send_window(self, seg: tcp.Repr, ack: int) -> None:
        """RFC 9293 §3.10.7.4 fifth (ESTABLISHED), the window update for an ACK with
        SND.UNA =< SEG.ACK: taken when SND.WL1 < SEG.SEQ, or SND.WL1 = SEG.SEQ and
        SND.WL2 =< SEG.ACK (so an older segment never shrinks the window).  Both the
        full path and header prediction call it.  Sequence arithmetic inlined (see
        HALF32): lt(a, b) is (a - b) & MASK32 >= HALF32."""
        t = self.tcb
        seq, wl1 = seg.seq, t.snd_wl1
        if (wl1 - seq) & MASK32 >= HALF32 or (wl1 == seq and (
                t.snd_wl2 == ack or (t.snd_wl2 - ack) & MASK32 >= HALF32)):
            t.snd_wnd = seg.window << t.snd_wscale
            if t.snd_wnd > t.max_snd_wnd:
                t.max_snd_wnd = t.snd_wnd
            t.snd_wl1, t.snd_wl2 = seq, ack

    def _ack_advance(self, seg: tcp.Repr, now: int) -> None:
        """New data acknowledged: RTT, send buffer, RTO timer (RFC 6298 §5.2/5.3)."""
        t = self.tcb
        ack = seg.ack
        # sub/add/lt inlined (see HALF32): once per ACK of new data
        acked = ((ack - t.snd_una + HALF32) & MASK32) - HALF32
        self._rtt_sample(seg, now)
        self.sender.drop_acked(ack)
        t.snd_una = ack
        if (t.snd_nxt - ack) & MASK32 >= HALF32:
            t.snd_nxt = ack  # after go-back-N the ACK may jump past SND.NXT
        self.loss.on_ack_advance(ack, acked)
        self.timers.data_acked()
        self.timers.rto_at = None if t.snd_una == t.snd_max else now + self.rto.rto
        space = self.sender.unblock(self.options)
        if space:
            self._events.append(SendSpaceAvailable(space))
            self.chrono.stop(SNDBUF_LIMITED, now, self.sender.queues_empty())  # tcp_check_space
        if t.snd_una == t.snd_max:
            self.chrono.stop(BUSY, now, self.sender.queues_empty())

    def _rtt_sample(self, seg: tcp.Repr, now: int) -> None:
        """RTTM (RFC 7323 §4) from TSecr, else Karn's timed segment (RFC 6298 §3)."""
        t = self.tcb
        if t.ts_ok and seg.timestamp is not None and seg.timestamp[1]:
            rtt_ms = sub(self.tcb.ts_val(now), seg.timestamp[1])
            if rtt_ms >= 0:
                self.rto.on_sample(max(rtt_ms, 1) * MS, seg.ack, t.snd_max)
            return
        sent_at = self.sender.rtt_sample(seg.ack)
        if sent_at is not None:
            self.rto.on_sample(now - sent_at, seg.ack, t.snd_max)

    def _rtt_sample_handshake(self, seg: tcp.Repr, now: int) -> None:
        t = self.tcb
        if t.ts_ok and seg.timestamp is not None and seg.timestamp[1]:
            rtt_ms = sub(self.tcb.ts_val(now), seg.timestamp[1])
            if 0 <= rtt_ms:
                self.rto.on_sample(max(rtt_ms, 1) * MS, seg.ack, t.snd_max)
        elif not self.timers.syn_retransmitted and self.timers.syn_sent_at is not None:
            # Karn: only unretransmitted SYNs
            self.rto.on_sample(now - self.timers.syn_sent_at, seg.ack, t.snd_max)
