"""The connection's timers: its deadlines (no clock here: the host's timer wheel fires
``Connection.on_timer``), the back-off state of each, and what each does on expiry --
retransmission (RFC 6298 §5.4-5.7, RFC 5681 §3.1 after a timeout), delayed ACK,
zero-window probes (persist), keep-alive, FIN-WAIT-2 and TIME-WAIT.

One slot per RFC timer; ``None`` means stopped.  The retransmission and persist timers
never run together (RFC 9293 §3.8.6.1: probing only happens with nothing in flight).
"""

from __future__ import annotations

import errno as errnos
from typing import TYPE_CHECKING

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.common import (
    ACK,
    CLOSE_WAIT,
    CLOSED,
    ESTABLISHED,
    FIN_WAIT_2,
    MS,
    RST,
    SYN_RECEIVED,
    SYN_SENT,
    TIME_WAIT,
)
from rcunet.core.tcp.rto import retransmits_timed_out
from rcunet.wire.seqnum import add, sub

if TYPE_CHECKING:
    from rcunet.core.tcp.connection import Connection

NAMES = ("rto_at", "delack_at", "persist_at", "keepalive_at", "time_wait_at", "fin_wait2_at",
         "tlp_at", "reo_at")

#: Linux TCP_RTO_MIN: the base of retransmits_timed_out's model, whatever the socket's
#: own RTO floor.
RTO_MIN = 200 * MS
#: Linux TCP_TIMEOUT_MIN (2 jiffies at HZ=1000): the shortest timer a clamp arms
TIMEOUT_MIN = 2 * MS


class Timers:
    """A connection's deadlines and the back-off state behind them (Linux icsk_retransmits,
    retrans_stamp, icsk_backoff for probes, icsk_probes_out/tstamp, keepalive probes).

    The back-off state has this object as its only writer.  Each deadline is armed by
    the part whose timer it is -- ``rto_at`` and ``persist_at`` by the sender,
    ``delack_at`` by ``DelayedAck``, the others by the state changes that start them --
    and cleared here when it fires."""

    # lockfree_read_slots: read by whichever thread holds the socket lock (Connection)
    __slots__ = lockfree_read_slots(
        *NAMES, "retransmits", "first_rtx_at", "syn_sent_at", "syn_retransmitted",
        "persist_backoff", "probes_out", "probes_tstamp", "keepalive_probes", "last_rcv_at")

    def __init__(self) -> None:
        self.rto_at: int | None = None  #: retransmission (RFC 6298 §5), also SYN and SYN,ACK
        self.delack_at: int | None = None  #: delayed ACK (RFC 1122 §4.2.3.2, RFC 5681 §4.2)
        self.persist_at: int | None = None  #: zero-window probe (RFC 9293 §3.8.6.1)
        self.keepalive_at: int | None = None  #: keep-alive (RFC 1122 §4.2.3.6)
        self.time_wait_at: int | None = None  #: 2MSL (RFC 9293 §3.10.7.4)
        self.fin_wait2_at: int | None = None  #: orphaned FIN-WAIT-2 (Linux tcp_fin_timeout)
        #: tail loss probe (tcp_schedule_loss_probe; set by LossRecovery)
        self.tlp_at: int | None = None
        #: RACK's reordering timer (tcp_rack_mark_lost; set by LossRecovery)
        self.reo_at: int | None = None
        self.retransmits = 0  #: consecutive RTO expiries
        self.first_rtx_at: int | None = None  #: Linux retrans_stamp
        self.syn_sent_at: int | None = None  #: when our first SYN (or SYN,ACK) went out
        self.syn_retransmitted = False
        self.persist_backoff = 0
        self.probes_out = 0  #: unanswered zero-window probes (Linux icsk_probes_out)
        self.probes_tstamp: int | None = None  #: the first of them (icsk_probes_tstamp)
        self.keepalive_probes = 0
        self.last_rcv_at = 0  #: when the peer last acknowledged or sent anything

    def __repr__(self) -> str:
        armed = ", ".join(f"{name}={getattr(self, name)}" for name in NAMES
                          if getattr(self, name) is not None)
        return f"Timers({armed})"

    def next_at(self) -> int | None:
        """The earliest armed deadline, or None when no timer runs."""
        earliest = None  # one pass, no list: the host asks after every engine call
        for at in (self.rto_at, self.delack_at, self.persist_at, self.keepalive_at,
                   self.time_wait_at, self.fin_wait2_at, self.tlp_at, self.reo_at):
            if at is not None and (earliest is None or at < earliest):
                earliest = at
        return earliest

    def stop_all(self) -> None:
        self.rto_at = self.delack_at = self.persist_at = None
        self.keepalive_at = self.time_wait_at = self.fin_wait2_at = None
        self.tlp_at = self.reo_at = None

    # ------------------------------------------------------------ state the peer resets
    def heard_from_peer(self, now: int) -> None:
        """An acceptable ACK arrived: the peer is alive; probes and keep-alives start over."""
        self.last_rcv_at = now
        self.keepalive_probes = 0
        self.probes_out = 0
        self.probes_tstamp = None

    def data_acked(self) -> None:
        """New data acknowledged: the retransmission back-off ends (tcp_clean_rtx_queue)."""
        self.retransmits = 0
        self.first_rtx_at = None

    def rto_undone(self) -> None:
        """The timeout proved spurious (tcp_try_undo_loss): the back-off count restarts."""
        self.retransmits = 0

    def data_received(self, now: int) -> None:
        """The peer sent data now (TCP_INFO's last_data_recv)."""
        self.last_rcv_at = now

    def syn_sent(self, now: int) -> None:
        """Our first SYN (or SYN,ACK) went out now."""
        if self.syn_sent_at is None:
            self.syn_sent_at = now

    def established(self, now: int) -> None:
        """The handshake completed: its retransmission timer and back-off end."""
        self.rto_at = None
        self.retransmits = 0
        self.last_rcv_at = now

    def persist_interval(self, base_rto: int, rto_max: int) -> int:
        return min(base_rto << self.persist_backoff, rto_max)

    def persist_stop(self) -> None:
        """Nothing waits on a closed window any more."""
        self.persist_at = None
        self.persist_backoff = 0

    def persist_answered(self) -> None:
        """The window opened at a probe: the next one starts from the base interval."""
        self.persist_backoff = 0

    # ------------------------------------------------------------ expiry
    def fire(self, conn: Connection, now: int) -> None:
        """Run every deadline of ``conn`` that is due (``Connection.on_timer``)."""
        if self.time_wait_at is not None and now >= self.time_wait_at:
            self.time_wait_at = None
            conn._enter_closed()
        if self.fin_wait2_at is not None and now >= self.fin_wait2_at:
            self.fin_wait2_at = None
            if conn.state is FIN_WAIT_2:
                conn._enter_closed()
        if self.reo_at is not None and now >= self.reo_at:
            self.reo_at = None
            conn.loss.on_reo_timer(conn, now)
        tlp_at = self.tlp_at
        if tlp_at is not None and now >= tlp_at:
            self.tlp_at = None
            # Linux holds the probe in the retransmission timer's place: due first (or
            # together), the probe goes and the RTO restarts from now
            if self.rto_at is None or tlp_at <= self.rto_at:
                conn.loss.send_probe(conn, now)
        if self.rto_at is not None and now >= self.rto_at:
            self.rto_at = None
            self._on_rto(conn, now)
        if self.persist_at is not None and now >= self.persist_at:
            self.persist_at = None
            self._on_persist(conn, now)
        if self.delack_at is not None and now >= self.delack_at:
            st = conn.state
            if conn.delack.fire(conn.options, st.synchronized or st is SYN_RECEIVED):
                conn.receiver.ack_at_once()
        if self.keepalive_at is not None and now >= self.keepalive_at:
            self.keepalive_at = None
            self._on_keepalive(conn, now)
        conn._output(now)

    def _on_rto(self, conn: Connection, now: int) -> None:
        """RFC 6298 §5.4-5.6, with Linux's give-up rules (tcp_write_timeout)."""
        t = conn.tcb
        o = conn.options
        st = conn.state
        if st in (SYN_SENT, SYN_RECEIVED):
            passive_synack = st is SYN_RECEIVED and conn.passive
            limit = o.synack_retries if passive_synack else o.syn_retries
            if o.user_timeout and not passive_synack and self.syn_sent_at is not None:
                # retransmits_timed_out with a user timeout: the time since the SYN
                # went out, not the count, decides (tcp_write_timeout)
                expired = now - self.syn_sent_at >= o.user_timeout
            else:
                expired = self.retransmits >= limit
            if expired:
                conn.counters.add("TcpExtTCPAbortOnTimeout")
                if st is SYN_SENT:
                    conn.counters.add("TcpAttemptFails")
                if conn.passive:
                    conn._enter_closed()
                else:
                    conn._fail(errnos.ETIMEDOUT)
                return
            conn.loss.count_rto(now, first=not self.retransmits, rehash=not passive_synack)
            conn.loss.note_syn_retransmit()
            self.retransmits += 1
            self.syn_retransmitted = True
            conn.rto.on_timeout()
            conn.counters.add("TcpExtTCPTimeouts")
            conn.counters.add("TcpExtTCPSynRetrans")
            conn.counters.add("TcpRetransSegs")
            conn._send_syn(now, retransmit=True, timed_out=True)
            if o.user_timeout and not passive_synack and self.syn_sent_at is not None:
                self._clamp_to_user_timeout(o.user_timeout, now, self.syn_sent_at)
            return
        if t.snd_una == t.snd_max or st is CLOSED or st is TIME_WAIT:
            return
        if self.first_rtx_at is None:
            self.first_rtx_at = now - conn.rto.rto  # ~ when the head was first sent
        first_rtx_at = self.first_rtx_at
        if t.snd_wnd == 0 and not conn._orphaned:
            # Linux tcp_retransmit_timer: the receiver shrank its window to zero under
            # data in flight.  Retransmissions are now window probes; give up only when
            # the peer has not ACKed anything for 2 * TCP_RTO_MAX (tcp_rtx_probe0_timed_out).
            timed_out = now - self.last_rcv_at > 2 * o.rto_max
            if o.user_timeout:  # tcp_rtx_probe0_timed_out
                timed_out = now - first_rtx_at >= o.user_timeout
        elif o.user_timeout:
            # retransmits_timed_out: TCP_USER_TIMEOUT replaces tcp_retries2's time bound
            timed_out = now - first_rtx_at >= o.user_timeout
        else:
            # retransmits_timed_out models the backoff from TCP_RTO_MIN itself, not the
            # socket's TCP_RTO_MIN_US, up to its tcp_rto_max (tcp_model_timeout)
            timed_out = now - first_rtx_at >= retransmits_timed_out(
                o.retries2, RTO_MIN, o.rto_max)
        if timed_out:
            conn.counters.add("TcpExtTCPAbortOnTimeout")
            conn._abort_timeout()
            return
        conn.loss.enter_loss(conn, now, self.retransmits)
        self.retransmits += 1
        conn.counters.add("TcpExtTCPTimeouts")
        conn.ecn.on_reduction()  # tcp_enter_loss: tcp_ecn_queue_cwr
        self.tlp_at = self.reo_at = None
        conn.sender.stop_rtt_timing()  # Karn
        conn.rto.on_timeout()
        t.snd_nxt = t.snd_una  # go back N; the head goes out even beyond the window
        end = conn.sender.retransmit_at(conn, t.snd_una, now)
        if end is not None:
            t.snd_nxt = end
        self.rto_at = now + conn.rto.rto
        if o.user_timeout:
            self._clamp_to_user_timeout(o.user_timeout, now, first_rtx_at)

    def _clamp_to_user_timeout(self, user_timeout: int, now: int, since: int) -> None:
        """tcp_clamp_rto_to_user_timeout: the next expiry comes no later than when the
        user timeout (counted from ``since``) runs out, and at least TCP_TIMEOUT_MIN
        (2 ms) from now, so the give-up happens on time, not one backed-off RTO late."""
        remaining = user_timeout - (now - since)
        at = self.rto_at
        if at is not None:
            self.rto_at = min(at, now + max(remaining, TIMEOUT_MIN))

    def _on_persist(self, conn: Connection, now: int) -> None:
        """RFC 9293 §3.8.6.1 zero-window probe (Linux: an old-seq ACK, tcp_xmit_probe_skb)."""
        t = conn.tcb
        if not conn.state.synchronized or t.snd_una != t.snd_max or conn.state is TIME_WAIT:
            return
        if not conn.sender.tx and not conn.sender.fin_queued:
            return
        room = sub(add(t.snd_una, t.snd_wnd), t.snd_nxt)
        if room > 0 and conn.sender.try_send(conn, now, room=t.snd_mss, force=True,
                                             push=True):
            self.persist_backoff = 0
            return
        o = conn.options
        user_timeout = o.user_timeout
        if user_timeout:
            # tcp_probe_timer: with TCP_USER_TIMEOUT, probes unanswered for that long
            if self.probes_tstamp is None:
                self.probes_tstamp = now
            elif now - self.probes_tstamp >= user_timeout:
                conn.counters.add("TcpExtTCPAbortOnTimeout")
                conn._abort_timeout()
                return
        if self.probes_out >= o.retries2:
            # Linux tcp_probe_timer: a peer that answers no probe at all is given up on;
            # one that keeps answering with a zero window is probed forever.
            conn.counters.add("TcpExtTCPAbortOnTimeout")
            conn._abort_timeout()
            return
        conn.counters.add("TcpExtTCPWinProbe")
        conn._emit(conn._make(add(t.snd_una, -1), ACK, now))
        self.probes_out += 1
        self.persist_backoff += 1
        at = now + self.persist_interval(conn.rto.base_rto, o.rto_max)
        if user_timeout and self.probes_tstamp is not None:
            # tcp_clamp_probe0_to_user_timeout
            remaining = user_timeout - (now - self.probes_tstamp)
            at = min(at, now + max(remaining, TIMEOUT_MIN))
        self.persist_at = at

    def _on_keepalive(self, conn: Connection, now: int) -> None:
        """RFC 1122 §4.2.3.6 keep-alive, Linux's timing (tcp_keepalive_timer)."""
        o = conn.options
        t = conn.tcb
        if not o.keepalive or conn.state not in (ESTABLISHED, CLOSE_WAIT, FIN_WAIT_2):
            return
        if t.snd_una != t.snd_max or conn.sender.tx:
            self.keepalive_at = now + o.keepalive_time  # data in flight: RTO covers it
            return
        idle = now - self.last_rcv_at
        if idle < o.keepalive_time and self.keepalive_probes == 0:
            self.keepalive_at = self.last_rcv_at + o.keepalive_time
            return
        if (self.keepalive_probes > 0 and idle >= o.user_timeout) if o.user_timeout \
                else self.keepalive_probes >= o.keepalive_probes:
            # tcp_keepalive_timer: with TCP_USER_TIMEOUT, the silence decides
            # tcp_keepalive_timer gives up with tcp_send_active_reset, then tcp_write_err
            conn._emit(conn._make(conn._acceptable_seq(), RST | ACK, now))
            conn.counters.add("TcpOutRsts")
            conn.counters.add("TcpExtTCPAbortOnTimeout")
            conn._fail(errnos.ETIMEDOUT)
            return
        self.keepalive_probes += 1
        conn.counters.add("TcpExtTCPKeepAlive")
        conn._emit(conn._make(add(t.snd_una, -1), ACK, now))
        self.keepalive_at = now + o.keepalive_intvl
