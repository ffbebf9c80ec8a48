"""Timer expiry: retransmission (RFC 6298 §5.4-5.7, RFC 5681 §3.1 after a timeout),
delayed ACK, zero-window probes (persist), keep-alive, FIN-WAIT-2 and TIME-WAIT."""

from __future__ import annotations

import errno as errnos

from rcunet.core.tcp.common import (
    ACK,
    CLOSE_WAIT,
    CLOSED,
    ESTABLISHED,
    FIN_WAIT_2,
    MASK32,
    MS,
    RST,
    SYN_RECEIVED,
    SYN_SENT,
    TIME_WAIT,
)
from rcunet.core.tcp.rto import retransmits_timed_out
from rcunet.wire.seqnum import add, sub

#: Linux TCP_TIMEOUT_MIN (2 jiffies at HZ=1000): the shortest timer a clamp arms
TIMEOUT_MIN = 2 * MS


class TimeoutsMixin:
    """``Connection``'s timer handlers (the deadlines live in ``timers.Timers``)."""

    __slots__ = ()

    def on_timer(self, now: int) -> None:
        """Run every deadline that is due (virtual time: call with ``next_deadline()``)."""
        self._now = now
        tm = self.timers
        if tm.time_wait_at is not None and now >= tm.time_wait_at:
            tm.time_wait_at = None
            self._enter_closed()
        if tm.fin_wait2_at is not None and now >= tm.fin_wait2_at:
            tm.fin_wait2_at = None
            if self.state is FIN_WAIT_2:
                self._enter_closed()
        if tm.rto_at is not None and now >= tm.rto_at:
            tm.rto_at = None
            self._on_rto(now)
        if tm.persist_at is not None and now >= tm.persist_at:
            tm.persist_at = None
            self._on_persist(now)
        if tm.delack_at is not None and now >= tm.delack_at:
            st = self.state
            if self.delack.fire(self.options, st.synchronized or st is SYN_RECEIVED):
                self._ack_now = True
        if tm.keepalive_at is not None and now >= tm.keepalive_at:
            tm.keepalive_at = None
            self._on_keepalive(now)
        self._output(now)

    def _on_rto(self, now: int) -> None:
        """RFC 6298 §5.4-5.6, with Linux's give-up rules (tcp_write_timeout)."""
        t = self.tcb
        o = self.options
        st = self.state
        if st in (SYN_SENT, SYN_RECEIVED):
            passive_synack = st is SYN_RECEIVED and self.passive
            limit = o.synack_retries if passive_synack else o.syn_retries
            if o.user_timeout and not passive_synack and self._syn_sent_at is not None:
                # retransmits_timed_out with a user timeout: the time since the SYN
                # went out, not the count, decides (tcp_write_timeout)
                expired = now - self._syn_sent_at >= o.user_timeout
            else:
                expired = self._retransmits >= limit
            if expired:
                self.counters.add("TcpExtTCPAbortOnTimeout")
                if st is SYN_SENT:
                    self.counters.add("TcpAttemptFails")
                if self.passive:
                    self._enter_closed()
                else:
                    self._fail(errnos.ETIMEDOUT)
                return
            self._retransmits += 1
            self._syn_retransmitted = True
            self.rto.on_timeout()
            self.counters.add("TcpExtTCPTimeouts")
            self.counters.add("TcpExtTCPSynRetrans")
            self.counters.add("TcpRetransSegs")
            self._send_syn(now, retransmit=True)
            if o.user_timeout and not passive_synack and self._syn_sent_at is not None:
                self._clamp_to_user_timeout(now, self._syn_sent_at)
            return
        if t.snd_una == t.snd_max or st is CLOSED or st is TIME_WAIT:
            return
        if self._first_rtx_at is None:
            self._first_rtx_at = now - self.rto.rto  # ~ when the head was first sent
        if t.snd_wnd == 0 and not self._orphaned:
            # Linux tcp_retransmit_timer: the receiver shrank its window to zero under
            # data in flight.  Retransmissions are now window probes; give up only when
            # the peer has not ACKed anything for 2 * TCP_RTO_MAX (tcp_rtx_probe0_timed_out).
            timed_out = now - self._last_rcv_at > 2 * o.rto_max
            if o.user_timeout:  # tcp_rtx_probe0_timed_out
                timed_out = now - self._first_rtx_at >= o.user_timeout
        elif o.user_timeout:
            # retransmits_timed_out: TCP_USER_TIMEOUT replaces tcp_retries2's time bound
            timed_out = now - self._first_rtx_at >= o.user_timeout
        else:
            timed_out = now - self._first_rtx_at >= retransmits_timed_out(
                o.retries2, o.rto_min, o.rto_max)
        if timed_out:
            self.counters.add("TcpExtTCPAbortOnTimeout")
            self._abort_timeout()
            return
        self._retransmits += 1
        self.counters.add("TcpExtTCPTimeouts")
        flight = sub(t.snd_max, t.snd_una)
        self.cc.on_timeout(now, flight)
        self.loss.on_timeout()
        self._stop_rtt_timing()  # Karn
        self.rto.on_timeout()
        t.snd_nxt = t.snd_una  # go back N; the head goes out even beyond the window
        end = self._retransmit_at(t.snd_una, now)
        if end is not None:
            t.snd_nxt = end
        self.timers.rto_at = now + self.rto.rto
        if o.user_timeout:
            self._clamp_to_user_timeout(now, self._first_rtx_at)

    def _clamp_to_user_timeout(self, now: int, since: int) -> None:
        """tcp_clamp_rto_to_user_timeout: the next expiry comes no later than when the
        user timeout (counted from ``since``) runs out, and at least TCP_TIMEOUT_MIN
        (2 ms) from now, so the give-up happens on time, not one backed-off RTO late."""
        remaining = self.options.user_timeout - (now - since)
        at = self.timers.rto_at
        if at is not None:
            self.timers.rto_at = min(at, now + max(remaining, TIMEOUT_MIN))

    def _abort_timeout(self) -> None:
        self._tx.clear()
        self._fail(errnos.ETIMEDOUT)

    def _on_persist(self, now: int) -> None:
        """RFC 9293 §3.8.6.1 zero-window probe (Linux: an old-seq ACK, tcp_xmit_probe_skb)."""
        t = self.tcb
        if not self.state.synchronized or t.snd_una != t.snd_max or self.state is TIME_WAIT:
            return
        if not self._tx and not self._fin_queued:
            return
        room = sub(add(t.snd_una, t.snd_wnd), t.snd_nxt)
        if room > 0 and self._try_send(now, room=t.snd_mss, force=True):
            self._persist_backoff = 0
            return
        user_timeout = self.options.user_timeout
        if user_timeout:
            # tcp_probe_timer: with TCP_USER_TIMEOUT, probes unanswered for that long
            if self._probes_tstamp is None:
                self._probes_tstamp = now
            elif now - self._probes_tstamp >= user_timeout:
                self.counters.add("TcpExtTCPAbortOnTimeout")
                self._abort_timeout()
                return
        if self._probes_out >= self.options.retries2:
            # Linux tcp_probe_timer: a peer that answers no probe at all is given up on;
            # one that keeps answering with a zero window is probed forever.
            self.counters.add("TcpExtTCPAbortOnTimeout")
            self._abort_timeout()
            return
        self.counters.add("TcpExtTCPWinProbe")
        self._emit(self._make((t.snd_una - 1) & MASK32, ACK, now))
        self._probes_out += 1
        self._persist_backoff += 1
        self.timers.persist_at = now + self._persist_interval()
        if user_timeout and self._probes_tstamp is not None:
            # tcp_clamp_probe0_to_user_timeout
            remaining = user_timeout - (now - self._probes_tstamp)
            self.timers.persist_at = min(self.timers.persist_at,
                                         now + max(remaining, TIMEOUT_MIN))

    def _persist_interval(self) -> int:
        return min(self.rto.base_rto << self._persist_backoff, self.options.rto_max)

    def _on_keepalive(self, now: int) -> None:
        """RFC 1122 §4.2.3.6 keep-alive, Linux's timing (tcp_keepalive_timer)."""
        o = self.options
        t = self.tcb
        if not o.keepalive or self.state not in (ESTABLISHED, CLOSE_WAIT,
                                                 FIN_WAIT_2):
            return
        if t.snd_una != t.snd_max or self._tx:
            self.timers.keepalive_at = now + o.keepalive_time  # data in flight: RTO covers it
            return
        idle = now - self._last_rcv_at
        if idle < o.keepalive_time and self._keepalive_probes == 0:
            self.timers.keepalive_at = self._last_rcv_at + o.keepalive_time
            return
        if (self._keepalive_probes > 0 and idle >= o.user_timeout) if o.user_timeout \
                else self._keepalive_probes >= o.keepalive_probes:
            # tcp_keepalive_timer: with TCP_USER_TIMEOUT, the silence decides
            # tcp_keepalive_timer gives up with tcp_send_active_reset, then tcp_write_err
            self._emit(self._make(self._acceptable_seq(), RST | ACK, now))
            self.counters.add("TcpOutRsts")
            self.counters.add("TcpExtTCPAbortOnTimeout")
            self._fail(errnos.ETIMEDOUT)
            return
        self._keepalive_probes += 1
        self.counters.add("TcpExtTCPKeepAlive")
        self._emit(self._make((t.snd_una - 1) & MASK32, ACK, now))
        self.timers.keepalive_at = now + o.keepalive_intvl
