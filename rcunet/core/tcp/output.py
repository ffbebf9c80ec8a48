"""What the connection sends now (RFC 9293 §3.8.6 windows, Nagle, SWS avoidance; RFC 6298
timers armed; RFC 2018 SACK blocks and RFC 7323 timestamps on every segment)."""

from __future__ import annotations

from rcunet.core.tcp.chrono import RWND_LIMITED
from rcunet.core.tcp.common import (
    ACK,
    CLOSED,
    CLOSING,
    FIN,
    FIN_WAIT_1,
    HALF32,
    LAST_ACK,
    MASK32,
    PSH,
    RST,
    SYN,
    SYN_RECEIVED,
    SYN_SENT,
    TIME_WAIT,
    segment_repr,
)
from rcunet.wire import tcp
from rcunet.wire.seqnum import add, le, lt, sub


class OutputMixin:
    """``Connection``'s output."""

    __slots__ = ()

    def _output(self, now: int) -> None:
        """Generate whatever the state allows: data, FIN, ACKs; then arm the timers."""
        st = self.state
        t = self.tcb
        if (st.synchronized and st is not TIME_WAIT) or (
                self.fastopen_child and st is SYN_RECEIVED):
            # (a Fast Open child sends before the handshake completes: tcp_sendmsg's
            # tcp_passive_fastopen exception, RFC 7413 §4.2.2)
            sent = len(self._out)
            had_unsent = self._unsent() > 0  # tcp_write_xmit runs with a send head
            if self.loss.algorithm is None:
                while self._try_send(now, room=self._cwnd_room()):
                    pass
            else:
                self.loss.output(self, now)
            burst = len(self._out) > sent
            if burst and self._tx:
                self._push_burst_end(sent)
            if had_unsent:
                self._chrono_rwnd(now)
            self._cwnd_validate(burst)
            self._arm_persist(now)
        if self._ack_now and st is not CLOSED and st is not SYN_SENT:
            self._emit_pure_ack(now)
        if self.timers.rto_at is None and t.snd_una != t.snd_max and st is not CLOSED \
                and st is not TIME_WAIT:
            self.timers.rto_at = now + self.rto.rto  # RFC 6298 §5.1

    def _queues_empty(self) -> bool:
        """tcp_rtx_and_write_queues_empty: nothing unacknowledged, nothing unsent."""
        return not len(self._tx) and self.tcb.snd_una == self.tcb.snd_max

    def _unsent(self) -> int:
        t = self.tcb
        return ((self._tx_seq + len(self._tx) - t.snd_nxt + HALF32) & MASK32) - HALF32

    def _chrono_rwnd(self, now: int) -> None:
        """End of tcp_write_xmit: the peer's window held back a segment congestion
        control would have sent (tcp_snd_wnd_test failed) -- or it did not."""
        t = self.tcb
        unsent = self._unsent()
        win_room = ((t.snd_una + t.snd_wnd - t.snd_nxt + HALF32) & MASK32) - HALF32
        if unsent > 0 and self._cwnd_room() > 0 and win_room < min(unsent, t.snd_mss):
            self.chrono.start(RWND_LIMITED, now)
        else:
            self.chrono.stop(RWND_LIMITED, now, self._queues_empty())

    def _push_burst_end(self, first: int) -> None:
        """PSH on the last new-data segment of a burst that congestion control or the
        peer's window cut short, where Linux's segments carry it.  Linux marks PSH on
        the skb that ends a write (tcp_push -> tcp_mark_push) and on the skb where a
        write passed half the peer's largest window (forced_push in tcp_sendmsg_locked);
        tcp_write_xmit then sends whole skbs, whose size follows the pacing rate
        (tcp_tso_autosize), so in slow start every burst ends at a marked skb.  rcunet
        has no skbs: it marks the burst's end when the write was a forced push
        (``_mark_push``) or, in slow start outside loss recovery, always -- the
        behaviour packetdrill's slow-start, MSS and initial-window scripts show, while
        its limited-transmit and post-recovery scripts show unmarked bursts.  A burst
        that ends because the data ran out already ended with the write's own PSH
        (``_try_send``); one that Nagle or SWS avoidance stopped gets none."""
        t = self.tcb
        snd_nxt = t.snd_nxt
        if snd_nxt != t.snd_max:
            return  # still resending below SND.MAX: the burst was retransmissions
        forced = self._forced_until
        if forced is None or (snd_nxt - forced) & MASK32 < HALF32:  # ge(snd_nxt, forced)
            loss = self.loss
            if loss.algorithm is not None or loss.dupacks or self.cc.cwnd >= self.cc.ssthresh:
                return
        unsent = ((self._tx_seq + len(self._tx) - snd_nxt + HALF32) & MASK32) - HALF32
        want = min(unsent, t.snd_mss)
        if want <= 0:
            return
        win_room = ((t.snd_una + t.snd_wnd - snd_nxt + HALF32) & MASK32) - HALF32
        if win_room >= want and self._cwnd_room() >= want:
            return  # not cwnd- or window-limited: Nagle or SWS held the rest
        out = self._out
        for i in range(len(out) - 1, first - 1, -1):
            seg = out[i]
            if seg.payload:
                if not seg.flags & (PSH | SYN | RST):
                    out[i] = seg._replace(flags=seg.flags | PSH)
                return

    def _cwnd_validate(self, sent: bool) -> None:
        """Linux tcp_cwnd_validate (end of tcp_write_xmit): remember whether cwnd limited
        a send in the current window, else the window's largest flight, for
        ``_is_cwnd_limited``; a new window starts once SND.UNA passes the last one's end."""
        t = self.tcb
        snd_una = t.snd_una
        flight = ((t.snd_nxt - snd_una + HALF32) & MASK32) - HALF32  # sub, inlined
        limited = flight >= self.cc.cwnd
        if not (sent or limited):
            return
        if (limited or (snd_una - self._max_flight_seq) & MASK32 < HALF32  # ge
                or (not self._cwnd_limited and flight > self._max_flight)):
            self._cwnd_limited = limited
            self._max_flight = flight
            self._max_flight_seq = t.snd_nxt

    def _stop_rtt_timing(self) -> None:
        """Karn: the timed segment's sample would be ambiguous; time none until the next
        new segment goes out."""
        self._rtt_seq = None

    def _grow_cwnd(self, acked: int, now: int) -> None:
        """New data acknowledged outside recovery: congestion control grows cwnd, but
        only while cwnd limits us (RFC 7661 §4.1 spirit; Linux tcp_cong_avoid asks
        tcp_is_cwnd_limited).  Header prediction calls it too."""
        if self._is_cwnd_limited():
            self.cc.on_ack(acked, now, self.rto.srtt)

    def _is_cwnd_limited(self) -> bool:
        """Linux tcp_is_cwnd_limited: cwnd limited a send in the current window, or, in
        slow start, cwnd is below twice the window's largest flight (``_cwnd_validate``
        keeps both), so slow start goes on while the ACKs drain the flight."""
        if self._cwnd_limited:
            return True
        cc = self.cc
        return cc.in_slow_start and cc.cwnd < 2 * self._max_flight

    def _nagle_applies(self) -> bool:
        """Nagle (RFC 896, RFC 1122 §4.2.3.4) as Linux runs it, Minshall's variant
        (tcp_nagle_check, tcp_minshall_check): a segment smaller than SMSS waits while an
        earlier small segment is unacknowledged -- full segments in flight do not hold
        it -- unless TCP_NODELAY.  Not while the writer waits for buffer space: nothing
        more can join the segment (Linux pushes with TCP_NAGLE_PUSH before sleeping in
        tcp_sendmsg).  The one copy of the rule: ``_try_send`` and ``send``'s shortcut
        (``_nagle_holds_tail``) both ask it."""
        t = self.tcb
        sml = self._snd_sml
        # tcp_minshall_check: after(snd_sml, snd_una) && !after(snd_sml, snd_nxt), with
        # Linux's snd_nxt being our SND.MAX (seqnum.lt/le inlined, see HALF32).  Only
        # small data segments move snd_sml, so a Fast Open child's SYN,ACK in flight
        # (its request socket's in Linux, not in packets_out) never holds one.
        return (not self.options.nodelay and not self._send_blocked
                and (t.snd_una - sml) & MASK32 >= HALF32
                and (t.snd_max - sml) & MASK32 < HALF32)

    def _tail_held(self) -> bool:
        """Does the partial segment at the tail wait?  tcp_nagle_check: TCP_CORK or a
        MSG_MORE send (TCP_NAGLE_CORK) holds it whatever is in flight, Nagle
        (``_nagle_applies``) while a small segment is unacknowledged; a writer waiting
        for buffer space pushes past both (TCP_NAGLE_PUSH)."""
        if self._push_once:
            return False
        if (self.options.cork or self._more) and not self._send_blocked:
            return True
        return self._nagle_applies()

    def _push_marked(self, end: int) -> bool:
        """Does a segment ending at ``end`` carry PSH: the last write's pushed tail
        (tcp_mark_push), a forced push inside a long write, the end of a MSG_ZEROCOPY skb
        (marked before a new one) or of a MSG_EOR record."""
        if end == self._psh_seq or end in self._eor_marks or end in self._skb_ends:
            return True
        marks = self._psh_marks
        if not marks:
            return False
        una = self.tcb.snd_una
        while marks and (una - marks[0]) & MASK32 < HALF32:  # ge(snd_una, mark)
            marks.popleft()  # acknowledged: no segment ends there again
        return end in marks

    def _record_left(self, seq: int) -> int:
        """Bytes from ``seq`` to the end of its MSG_EOR record (a segment never joins
        two: tcp_skb_can_collapse_to); records wholly acknowledged are forgotten."""
        marks = self._eor_marks
        una = self.tcb.snd_una
        while marks and (una - marks[0]) & MASK32 < HALF32:  # ge(snd_una, mark)
            marks.popleft()
        for mark in marks:
            left = ((mark - seq + HALF32) & MASK32) - HALF32
            if left > 0:
                return left
        return HALF32

    def _cwnd_room(self) -> int:
        """Bytes congestion control lets us put in flight now.

        RFC 3042 limited transmit: the first two duplicate ACKs each allow one more new
        segment beyond cwnd (cwnd itself is unchanged).
        """
        t = self.tcb
        snd_nxt = t.snd_nxt
        # seqnum.sub(snd_nxt, snd_una) and seqnum.lt inlined (see HALF32): once per send
        room = self.cc.cwnd - (((snd_nxt - t.snd_una + HALF32) & MASK32) - HALF32)
        loss = self.loss
        if loss.algorithm is None and loss.dupacks and snd_nxt == t.snd_max:
            room += min(loss.dupacks, 2) * t.snd_mss
        if t.sack_ok and (snd_nxt - t.snd_max) & MASK32 >= HALF32:
            # going back N after an RTO: what the peer SACKed since is not in flight
            room += loss.sacked_below(t.snd_nxt)
        return room

    def _emit_pure_ack(self, now: int) -> None:
        self._emit(self._make(self._acceptable_seq(), ACK, now))

    def _acceptable_seq(self) -> int:
        """The sequence number of a segment that carries no data (an ACK, a RST): the
        highest one sent, as Linux's tcp_acceptable_seq (its snd_nxt never moves back;
        BSD's tcp_output uses snd_max), or the send window's right edge if that is
        lower.  Not SND.NXT: after an RTO rolled it back, the peer already holds the
        bytes above it, finds such an ACK below RCV.NXT and drops it unread; with both
        ends in go-back-N each dropped the other's ACKs for ever."""
        t = self.tcb
        snd_max = t.snd_max
        wnd_end = (t.snd_una + t.snd_wnd) & MASK32
        # not lt(wnd_end, snd_max), or past it by less than one window unit (Linux)
        if (wnd_end - snd_max) & MASK32 < HALF32 \
                or (snd_max - wnd_end) & MASK32 < 1 << t.rcv_wscale:
            return snd_max
        return wnd_end

    def _try_send(self, now: int, room: int, force: bool = False) -> bool:
        """Send one segment from SND.NXT if the windows, Nagle and SWS rules allow it.

        ``room`` is what congestion control allows (cwnd minus flight, or one SMSS in
        SACK recovery).  ``force`` overrides SWS/Nagle (persist timer expiry).
        """
        t = self.tcb
        # Sequence arithmetic inlined (see HALF32; this runs at least once per engine
        # call that may send): lt(a, b) is (a - b) & MASK32 >= HALF32, sub(a, b) is
        # ((a - b + HALF32) & MASK32) - HALF32, add(a, n) is (a + n) & MASK32.
        sacked_limit = (self._skip_sacked() if (t.snd_nxt - t.snd_max) & MASK32 >= HALF32
                        else None)  # may move snd_nxt: loaded after it
        snd_nxt = t.snd_nxt
        data_end = (self._tx_seq + len(self._tx)) & MASK32
        avail = ((data_end - snd_nxt + HALF32) & MASK32) - HALF32
        if avail < 0 or (avail == 0 and not self._fin_queued):
            return False  # nothing (more) to send: the common second call from _output
        fin_pending = self._fin_queued and self.state in (
            FIN_WAIT_1, CLOSING, LAST_ACK) and le(snd_nxt, data_end) \
            and not self._fin_acked
        if self._skb_ends:  # an skb ends before the data: this segment stops there
            bound = self._skb_bound(snd_nxt)
            if bound is not None and bound < avail:
                avail, fin_pending = bound, False
        win_room = ((t.snd_una + t.snd_wnd - snd_nxt + HALF32) & MASK32) - HALF32
        record = avail  # bytes up to the end of the data, or of the MSG_EOR record
        if self._eor_marks:
            record = min(avail, self._record_left(snd_nxt))
        n = min(record, t.snd_mss, win_room, room)
        if sacked_limit is not None:
            n = min(n, sacked_limit)
        if n < 0:
            n = 0
        retransmission = (snd_nxt - t.snd_max) & MASK32 >= HALF32
        if n == 0 and not (fin_pending and avail == 0):
            return False
        if not retransmission and not force and n < record:
            # Sender SWS avoidance (RFC 9293 §3.8.6.2.1): a full segment, or half the
            # largest window the peer ever offered.
            if n < t.snd_mss and n < t.max_snd_wnd // 2:
                return False
        if (not retransmission and not force and n == avail and 0 < n < t.snd_mss
                and not fin_pending and self._tail_held()):
            return False  # Nagle or the cork: this small segment waits
        fin = fin_pending and n == avail and win_room > n
        if n == 0 and not fin:
            return False
        seq = snd_nxt
        off = ((seq - self._tx_seq + HALF32) & MASK32) - HALF32
        payload = self._tx.slice(off, n)
        flags = ACK | (FIN if fin else 0)
        if n and (force or self._push_marked((seq + n) & MASK32)):
            flags |= PSH  # tcp_write_wakeup (the probe timer's send) sets PSH as well
        self._emit(self._make(seq, flags, now, payload))
        if n:
            self.delack.data_sent(now)
        end = (seq + n + (1 if fin else 0)) & MASK32
        if 0 < n < t.snd_mss and not retransmission:
            self._snd_sml = end  # tcp_minshall_update
        if retransmission:
            self.counters.add("TcpRetransSegs")
        elif self._rtt_seq is None and not t.ts_ok:
            self._rtt_seq, self._rtt_start = end, now  # time this segment (Karn, RFC 6298 §3)
        t.snd_nxt = end
        if (t.snd_max - end) & MASK32 >= HALF32:  # gt(end, snd_max)
            t.snd_max = end
        if self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto  # RFC 6298 §5.1
        self.timers.persist_at = None
        return True

    def _skb_bound(self, seq: int) -> int | None:
        """Bytes from ``seq`` to the next skb end after it (None: none before the data's
        end); ends the peer acknowledged are dropped first."""
        ends = self._skb_ends
        una = self.tcb.snd_una
        while ends and (una - ends[0]) & MASK32 < HALF32:  # le(end, snd_una)
            ends.popleft()
        for end in ends:
            d = ((end - seq + HALF32) & MASK32) - HALF32
            if d > 0:
                return d
        return None

    def _skip_sacked(self) -> int | None:
        """Go-back-N after an RTO skips what the peer SACKed since (RFC 6675 §5.1).

        Moves SND.NXT past SACKed ranges; returns how many bytes may go before the next
        SACKed range (None: no limit).  SACK information from before the timeout was
        discarded (RFC 2018 §8), so only fresh reports are trusted here.
        """
        t = self.tcb
        if not t.sack_ok:
            return None
        off = sub(t.snd_nxt, t.snd_una)
        for start, end in self.loss.scoreboard.ranges():
            if end <= off:
                continue
            if start <= off:
                off = end
                t.snd_nxt = add(t.snd_una, off)
                continue
            return start - off
        return None

    def _retransmit_at(self, seq: int, now: int, max_len: int | None = None) -> int | None:
        """Retransmit one segment starting at ``seq``; return its end sequence number."""
        t = self.tcb
        off = sub(seq, self._tx_seq)
        if off < 0:
            return None
        limit = t.snd_mss if max_len is None else min(max_len, t.snd_mss)
        bound = self._skb_bound(seq) if self._skb_ends else None
        if bound is not None:
            limit = min(limit, bound)
        if self._eor_marks:
            limit = min(limit, self._record_left(seq))
        n = max(0, min(limit, len(self._tx) - off))
        fin = (self._fin_queued and off + n == len(self._tx)
               and self.state in (FIN_WAIT_1, CLOSING, LAST_ACK)
               and lt(add(seq, n), t.snd_max))
        if n == 0 and not fin:
            return None
        flags = ACK | (FIN if fin else 0) | (
            PSH if n and (off + n == len(self._tx) or n == bound
                          or self._push_marked(add(seq, n))) else 0)
        self._emit(self._make(seq, flags, now, self._tx.slice(off, n)))
        if n:
            self.delack.data_sent(now)
        self.counters.add("TcpRetransSegs")
        end = add(seq, n + (1 if fin else 0))
        if self._rtt_seq is not None and lt(seq, self._rtt_seq):
            self._rtt_seq = None  # Karn: never time a retransmitted segment
        if self.timers.rto_at is None:
            self.timers.rto_at = now + self.rto.rto
        return end

    def _arm_persist(self, now: int) -> None:
        """Start the persist timer when data waits on a closed window with nothing in flight."""
        t = self.tcb
        if t.snd_una != t.snd_max:
            return
        waiting = bool(self._tx) or (self._fin_queued and not self._fin_acked)
        tm = self.timers
        if not waiting:
            tm.persist_stop()
            return
        if tm.persist_at is None:
            tm.persist_at = now + tm.persist_interval(self.rto.base_rto, self.options.rto_max)

    def _maybe_window_update(self) -> None:
        """After recv(): ACK at once when an ACK is due and more than one segment is
        unacknowledged (the input path held it while nobody read), or when the window at
        least doubles (Linux __tcp_cleanup_rbuf)."""
        t = self.tcb
        if not self.state.receives_data:
            return
        if (self.timers.delack_at is not None and self._rcv_unacked > t.rcv_mss
                or self.delack.read_wants_ack(not self._rx)):
            self._ack_now = True
            return
        now_wnd = t.rcv_wnd
        cap = self._window_cap()
        if 2 * now_wnd <= cap:
            new_wnd = (self._free_window() >> t.rcv_wscale) << t.rcv_wscale
            if new_wnd and new_wnd >= 2 * now_wnd:
                self._ack_now = True

    def _window_cap(self) -> int:
        """The most any window may be: the buffer, what the scale can express, and the
        window clamp (Linux __tcp_select_window: min(window_clamp, tcp_full_space))."""
        cap = min(self.options.rcvbuf, 0xFFFF << self.tcb.rcv_wscale)
        clamp = self.autotune.window_clamp
        return min(cap, clamp) if clamp else cap

    def _free_window(self) -> int:
        """The window the buffer allows now (Linux __tcp_select_window before rounding):
        the buffer's free bytes, within the clamp."""
        free = max(0, min(self.options.rcvbuf, 0xFFFF << self.tcb.rcv_wscale) - len(self._rx))
        clamp = self.autotune.window_clamp
        return min(free, clamp) if clamp else free

    def _window_field(self) -> int:
        """The 16-bit window to advertise, with receiver SWS avoidance (RFC 9293 §3.8.6.2.2).

        The right edge never moves left except by scaling granularity (RFC 7323 §2.4);
        it moves right only by at least min(buffer/2, MSS).
        """
        t = self.tcb
        ws = t.rcv_wscale
        cap = self._window_cap()
        free = self._free_window()
        cur = t.rcv_wnd
        if free - cur < min(cap // 2, t.rcv_mss):
            field = cur >> ws
        else:
            field = free >> ws
        field = min(field, 0xFFFF)
        edge = (t.rcv_nxt + (field << ws)) & MASK32  # add, inlined (see HALF32)
        if (t.rcv_adv - edge) & MASK32 >= HALF32:  # gt(edge, rcv_adv)
            t.rcv_adv = edge
        return field

    def _make(self, seq: int, flags: int, now: int, payload: bytes = b"") -> tcp.Repr:
        """A non-SYN segment with our window, timestamps and SACK blocks."""
        t = self.tcb
        ts = (self.tcb.ts_val(now), t.ts_recent) if t.ts_ok else None
        blocks: tuple[tuple[int, int], ...] = ()
        if flags & ACK:
            ack = t.rcv_nxt
            if t.sack_ok and (len(self._ofo) or self._dsack is not None):
                limit = 3 if t.ts_ok else 4  # RFC 2018 §3: 40 bytes of option space
                if payload:
                    # a data segment carries only the blocks that fit in what its payload
                    # leaves of snd_mss (NOP NOP kind len: 4 bytes, then 8 per block), so
                    # header + data never exceed the MTU; pure ACKs carry them all
                    limit = min(limit, max(0, (t.snd_mss - len(payload) - 4) // 8))
                held = self._ofo.ranges() if limit else []
                if self._dsack is not None and limit:  # RFC 2883 §4: D-SACK goes first
                    blocks = (self._dsack,)
                    self._dsack = None
                    limit -= 1
                blocks += tuple((add(t.rcv_nxt, s), add(t.rcv_nxt, e))
                                for s, e in self._rx_blocks.blocks(held, limit))
            window = self._window_field()
            t.last_ack_sent = ack
            self.delack.ack_sent(self.options)
            self._ack_now = False
            self._rcv_unacked = 0
        else:
            ack, window = 0, 0
        if flags & RST:
            # an active reset (tcp_send_active_reset) goes out through tcp_transmit_skb,
            # which gives it the receive window like any segment: no SACK blocks, though
            blocks = ()
        return segment_repr(self.local_port, self.remote_port, seq & MASK32, ack, flags,
                            window, payload, blocks, ts)

    def _emit(self, seg: tcp.Repr) -> None:
        self._out.append(seg)
        values = self.counters.values  # counters.add("TcpOutSegs"), inlined: every segment
        values["TcpOutSegs"] = values["TcpOutSegs"] + 1 if "TcpOutSegs" in values else 1
