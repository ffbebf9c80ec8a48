"""When received data is acknowledged: Linux's delayed-ACK engine (RFC 1122 §4.2.3.2,
RFC 5681 §4.2).

* quick-ack mode: the first data of a connection, and data after a long silence, is
  ACKed segment by segment for up to 16 ACKs (``tcp_incr_quickack``), so a sender in slow
  start is not held by our timer; duplicate and out-of-window data re-enter it
  (``tcp_enter_quickack_mode``);
* the adaptive timeout ``ato``: it follows the peer's inter-segment gap
  (``tcp_event_data_recv``), doubles each time the timer fires (``tcp_delack_timer_handler``)
  and is bounded by the RTT (``tcp_send_delayed_ack``);
* pingpong (interactive) mode: data we send within ``ato`` of data received carries the
  ACK, so quick ACKs stop (``tcp_event_data_sent`` -> ``inet_csk_inc_pingpong_cnt``); a
  delayed ACK that had to fire ends it.

Times are ns (Linux counts jiffies).  ``_ack_sched`` is ``inet_csk_ack_scheduled``
(received data not ACKed yet), ``_ack_pushed`` the ICSK_ACK_PUSHED/PUSHED2 bits; all are
cleared by the next segment we send with an ACK (``tcp_event_ack_sent``).
"""

from __future__ import annotations

from rcunet.core.tcp.common import MS

#: Linux TCP_MAX_QUICKACKS: the most ACKs one entry into quick-ack mode sends at once.
MAX_QUICKACKS = 16
#: Linux TCP_DELACK_MAX: the longest a delayed ACK waits (icsk_delack_max).
DELACK_MAX = 200 * MS
#: Linux tcp_send_delayed_ack's cap for a bulk receiver (HZ / 2).
DELACK_BULK_MAX = 500 * MS
#: net.ipv4.tcp_pingpong_thresh: replies within ato that make a connection interactive.
PINGPONG_THRESH = 1
PUSHED, PUSHED2 = 1, 2


class DelayedAckMixin:
    """``Connection``'s ACK timing for received data."""

    __slots__ = ()

    def _in_quickack_mode(self) -> bool:
        """tcp_in_quickack_mode: quick ACKs left, and not interactive."""
        return bool(self._quick) and self._pingpong < PINGPONG_THRESH

    def _incr_quickack(self, max_quickacks: int) -> None:
        """tcp_incr_quickack: enough quick ACKs to open half the window we offered."""
        quickacks = self._offered_window() // (2 * self.tcb.rcv_mss) or 2
        quickacks = min(quickacks, max_quickacks)
        if quickacks > self._quick:
            self._quick = quickacks

    def _enter_quickack_mode(self) -> None:
        """tcp_enter_quickack_mode: quick ACKs, out of pingpong, ato back to its floor."""
        self._incr_quickack(MAX_QUICKACKS)
        self._pingpong = 0
        self._ato = self.options.delack_delay

    def _event_data_recv(self, length: int, psh: bool, now: int) -> None:
        """tcp_event_data_recv (with tcp_measure_rcv_mss's PUSHED bits) for in-order data:
        schedule an ACK and adapt ``ato`` to the gap since the previous data."""
        self._ack_sched = True
        if length < self.tcb.rcv_mss:  # a short segment: likely the end of a write
            if self._ack_pushed & PUSHED:
                self._ack_pushed |= PUSHED2
            self._ack_pushed |= PUSHED
        elif psh:
            self._ack_pushed |= PUSHED
        ato_min = self.options.delack_delay
        if not self._ato:  # the first data: start the delayed-ACK engine in quick mode
            self._incr_quickack(MAX_QUICKACKS)
            self._ato = ato_min
        else:
            gap = now - self._lrcvtime
            if gap <= ato_min // 2:
                self._ato = (self._ato >> 1) + ato_min // 2
            elif gap < self._ato:
                self._ato = min((self._ato >> 1) + gap, self.rto.rto)
            elif gap > self.rto.rto:  # the sender stalled: ACK quickly while it restarts
                self._incr_quickack(MAX_QUICKACKS)
        self._lrcvtime = now

    def _send_delayed_ack(self, now: int) -> None:
        """tcp_send_delayed_ack: arm the timer ``ato`` from now, bounded by the RTT; an
        armed timer only moves earlier, and one about to fire is taken as due now."""
        ato = self._ato
        if ato > self.options.delack_delay:
            max_ato = DELACK_MAX if (self._pingpong >= PINGPONG_THRESH
                                     or self._ack_pushed & PUSHED) else DELACK_BULK_MAX
            srtt = self.rto.srtt
            if srtt is not None:
                max_ato = min(max_ato, max(srtt, self.options.delack_delay))
            ato = min(ato, max_ato)
        ato = min(ato, DELACK_MAX)
        timeout = now + ato
        armed = self.timers.delack_at
        if armed is not None:
            if armed <= now + (ato >> 2):
                self._ack_now = True
                return
            timeout = min(timeout, armed)
        self.timers.delack_at = timeout

    def _ack_sent(self) -> None:
        """tcp_event_ack_sent: tcp_dec_quickack_mode, then the ACK state is clear."""
        if self._quick:
            sent = 1 if self._ack_sched else 0
            if sent >= self._quick:
                self._quick = 0
                self._ato = self.options.delack_delay  # leaving quick mode deflates ato
            else:
                self._quick -= sent
        self._ack_sched = False
        self._ack_pushed = 0

    def _ack_fin_in_established(self, gap_filled: bool, now: int) -> None:
        """tcp_fin in ESTABLISHED enters pingpong mode (inet_csk_enter_pingpong_mode), so
        the FIN's ACK follows __tcp_ack_snd_check without quick-ack mode: at once when a
        gap was filled (the FIN came from the out-of-order queue: ICSK_ACK_NOW) or more
        than one full segment is unacknowledged, otherwise after ``ato`` -- 0 on a
        connection that never received data (the timer is due at once), 40 ms or more
        once it has.  Whatever else asked for an ACK now (a D-SACK, quick-ack mode) no
        longer does.  Its caller took the FIN into CLOSE-WAIT."""
        self._pingpong = PINGPONG_THRESH
        self._ack_sched = True  # inet_csk_schedule_ack
        if (gap_filled or self._full_segments_unacked(fin=1)
                or len(self._rx) > self.options.rcvbuf):
            # the last: tcp_data_queue found the queue over SO_RCVBUF (ICSK_ACK_NOW)
            self._ack_now = True
            return
        if not self._ato:
            # tcp_send_delayed_ack arms the timer for now: run its handler here (it ends
            # pingpong mode and counts a delayed ACK) instead of a zero-length wait.
            self._delack_timer_fired()
            self.counters.add("TcpExtDelayedACKs")
            self._ack_now = True
            return
        self._ack_now = False
        self._send_delayed_ack(now)

    def _delack_timer_fired(self) -> None:
        """tcp_delack_timer_handler: a delayed ACK that had to wait for the timer means
        the gap outgrew ``ato`` (inflate it) or the exchange is not interactive."""
        if not self._ack_sched:
            return
        if self._pingpong < PINGPONG_THRESH:
            self._ato = min(self._ato << 1, self.rto.rto)
        else:
            self._pingpong = 0
            self._ato = self.options.delack_delay

    def _event_data_sent(self, now: int) -> None:
        """tcp_event_data_sent: data sent within ``ato`` of data received is a reply."""
        if now - self._lrcvtime < self._ato and self._pingpong < 255:
            self._pingpong += 1

    def _read_wants_ack(self) -> bool:
        """tcp_cleanup_rbuf's second reason to ACK after a read that emptied the queue:
        a short (pushed) segment was in it and the exchange is not interactive."""
        return self._ack_sched and not self._rx and bool(
            self._ack_pushed & PUSHED2
            or (self._ack_pushed & PUSHED and self._pingpong < PINGPONG_THRESH))
