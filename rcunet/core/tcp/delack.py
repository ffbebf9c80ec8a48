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

Times are ns (Linux counts jiffies).  ``scheduled`` is ``inet_csk_ack_scheduled``
(received data not ACKed yet), ``pushed`` the ICSK_ACK_PUSHED/PUSHED2 bits; all are
cleared by the next segment we send with an ACK (``tcp_event_ack_sent``).
"""

from __future__ import annotations

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.common import MS
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.options import JIFFY, Options
from rcunet.core.tcp.rto import RtoEstimator
from rcunet.core.tcp.tcb import Tcb
from rcunet.core.tcp.timers import Timers

#: Linux TCP_MAX_QUICKACKS: the most ACKs one entry into quick-ack mode sends at once.
MAX_QUICKACKS = 16
#: Linux TCP_DELACK_MAX: the longest a delayed ACK waits by default (icsk_delack_max;
#: TCP_DELACK_MAX_US sets it per socket, ``Options.delack_max``).
DELACK_MAX = 200 * MS
#: Linux tcp_send_delayed_ack's cap for a bulk receiver (HZ / 2).
DELACK_BULK_MAX = 500 * MS
#: net.ipv4.tcp_pingpong_thresh: replies within ato that make a connection interactive.
PINGPONG_THRESH = 1
PUSHED, PUSHED2 = 1, 2


def delack_max(options: Options) -> int:
    """Linux tcp_delack_max: icsk_delack_max, but less than the RTO floor by a jiffy, so a
    peer that holds its retransmission for rto_min never times out waiting for our ACK
    (max(tcp_rto_min(sk), 2) - 1 jiffies: 199 ms with the defaults)."""
    return min(options.delack_max, max(options.rto_min, 2 * JIFFY) - JIFFY)


class DelayedAck:
    """A connection's ACK timing for received data (Linux icsk_ack), the only writer of
    these fields and of the delayed-ACK deadline.  Methods that may decide an ACK is due
    at once return True; the connection then sends it."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots("tcb", "timers", "rto", "counters", "ato", "quick", "pingpong",
                 "lrcvtime", "scheduled", "pushed")

    def __init__(self, tcb: Tcb, timers: Timers, rto: RtoEstimator, counters: Counters) -> None:
        self.tcb = tcb
        self.timers = timers
        self.rto = rto
        self.counters = counters
        self.ato = 0  # the delayed-ACK timeout; 0 until the first data
        self.quick = 0  # quick ACKs left (icsk_ack.quick)
        self.pingpong = 0
        self.lrcvtime = 0  # when in-order data last arrived
        self.scheduled = False
        self.pushed = 0

    def in_quickack_mode(self) -> bool:
        """tcp_in_quickack_mode: quick ACKs left, and not interactive."""
        return bool(self.quick) and self.pingpong < PINGPONG_THRESH

    def _incr_quickack(self, max_quickacks: int) -> None:
        """tcp_incr_quickack: enough quick ACKs to open half the window we offered."""
        t = self.tcb
        quickacks = t.offered_window // (2 * t.rcv_mss) or 2
        quickacks = min(quickacks, max_quickacks)
        if quickacks > self.quick:
            self.quick = quickacks

    def enter_quickack_mode(self, options: Options, max_quickacks: int = MAX_QUICKACKS) -> None:
        """tcp_enter_quickack_mode: quick ACKs (at most ``max_quickacks``: an ECN event
        asks for 2), out of pingpong, ato back to its floor."""
        self._incr_quickack(max_quickacks)
        self.pingpong = 0
        self.ato = options.delack_delay

    def leave_quickack_mode(self, options: Options, now: int) -> None:
        """As 16 ACKed segments would (tcp_dec_quickack_mode): no quick ACKs left, ato at
        its floor, data just arrived.  For tests of the delayed-ACK rules."""
        self.quick = 0
        self.ato = options.delack_delay
        self.lrcvtime = now

    def schedule(self) -> None:
        """inet_csk_schedule_ack: received data waits for an ACK."""
        self.scheduled = True

    def data_received(self, length: int, psh: bool, options: Options, now: int) -> None:
        """tcp_event_data_recv (with tcp_measure_rcv_mss's PUSHED bits) for in-order data:
        schedule an ACK and adapt ``ato`` to the gap since the previous data."""
        self.scheduled = True
        if length < self.tcb.rcv_mss:  # a short segment: likely the end of a write
            if self.pushed & PUSHED:
                self.pushed |= PUSHED2
            self.pushed |= PUSHED
        elif psh:
            self.pushed |= PUSHED
        ato_min = options.delack_delay
        if not self.ato:  # the first data: start the delayed-ACK engine in quick mode
            self._incr_quickack(MAX_QUICKACKS)
            self.ato = ato_min
        else:
            gap = now - self.lrcvtime
            if gap <= ato_min // 2:
                self.ato = (self.ato >> 1) + ato_min // 2
            elif gap < self.ato:
                self.ato = min((self.ato >> 1) + gap, self.rto.rto)
            elif gap > self.rto.rto:  # the sender stalled: ACK quickly while it restarts
                self._incr_quickack(MAX_QUICKACKS)
        self.lrcvtime = now

    def delay(self, options: Options, now: int) -> bool:
        """tcp_send_delayed_ack: arm the timer ``ato`` from now, bounded by the RTT; an
        armed timer only moves earlier, and one about to fire is taken as due now (True:
        ACK at once)."""
        ato = self.ato
        delack_delay = options.delack_delay
        longest = delack_max(options)
        if ato > delack_delay:
            max_ato = longest if (self.pingpong >= PINGPONG_THRESH
                                  or self.pushed & PUSHED) else DELACK_BULK_MAX
            srtt = self.rto.srtt
            if srtt is not None:
                max_ato = min(max_ato, max(srtt, delack_delay))
            ato = min(ato, max_ato)
        ato = min(ato, longest)
        timeout = now + ato
        armed = self.timers.delack_at
        if armed is not None:
            if armed <= now + (ato >> 2):
                return True
            timeout = min(timeout, armed)
        self.timers.delack_at = timeout
        return False

    def ack_sent(self, options: Options) -> None:
        """tcp_event_ack_sent: tcp_dec_quickack_mode, then the ACK state is clear and the
        delayed-ACK timer stopped."""
        if self.quick:
            sent = 1 if self.scheduled else 0
            if sent >= self.quick:
                self.quick = 0
                self.ato = options.delack_delay  # leaving quick mode deflates ato
            else:
                self.quick -= sent
        self.scheduled = False
        self.pushed = 0
        self.timers.delack_at = None

    def fin_in_established(self, at_once: bool, options: Options, now: int) -> bool:
        """tcp_fin in ESTABLISHED enters pingpong mode (inet_csk_enter_pingpong_mode), so
        the FIN's ACK follows __tcp_ack_snd_check without quick-ack mode: at once when
        ``at_once`` (a gap was filled, more than one full segment is unacknowledged, or
        the receive queue is over SO_RCVBUF: ICSK_ACK_NOW), otherwise after ``ato`` -- 0
        on a connection that never received data (the timer is due at once), 40 ms or
        more once it has.  Returns whether the ACK goes now; whatever else asked for an
        ACK now (a D-SACK, quick-ack mode) no longer does.  Its caller took the FIN into
        CLOSE-WAIT."""
        self.pingpong = PINGPONG_THRESH
        self.scheduled = True  # inet_csk_schedule_ack
        if at_once:
            return True
        if not self.ato:
            # tcp_send_delayed_ack arms the timer for now: run its handler here (it ends
            # pingpong mode and counts a delayed ACK) instead of a zero-length wait.
            self._timer_handler(options)
            self.counters.add("TcpExtDelayedACKs")
            return True
        return self.delay(options, now)

    def fire(self, options: Options, synchronized: bool) -> bool:
        """The delayed-ACK deadline passed: True, the ACK goes now (the caller sends
        it), unless the connection is not ``synchronized`` (or SYN-RECEIVED) any more."""
        self.timers.delack_at = None
        if not synchronized:
            return False
        self._timer_handler(options)
        self.counters.add("TcpExtDelayedACKs")
        return True

    def _timer_handler(self, options: Options) -> None:
        """tcp_delack_timer_handler: a delayed ACK that had to wait for the timer means
        the gap outgrew ``ato`` (inflate it) or the exchange is not interactive."""
        if not self.scheduled:
            return
        if self.pingpong < PINGPONG_THRESH:
            self.ato = min(self.ato << 1, self.rto.rto)
        else:
            self.pingpong = 0
            self.ato = options.delack_delay

    def data_sent(self, now: int) -> None:
        """tcp_event_data_sent: data sent within ``ato`` of data received is a reply."""
        if now - self.lrcvtime < self.ato and self.pingpong < 255:
            self.pingpong += 1

    def read_wants_ack(self, rx_empty: bool) -> bool:
        """tcp_cleanup_rbuf's second reason to ACK after a read that emptied the queue
        (``rx_empty``): a short (pushed) segment was in it and the exchange is not
        interactive."""
        return self.scheduled and rx_empty and bool(
            self.pushed & PUSHED2
            or (self.pushed & PUSHED and self.pingpong < PINGPONG_THRESH))
