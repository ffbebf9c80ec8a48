"""The glue between a socket and its sans-IO engine, under the socket lock: a segment
from the backlog, what the engine produced after each call (segments to the outbox,
events, counters, the timer), setsockopt reaching the engine, the post-unlock step
(transmit, then the teardown the engine asked for), timers and ``tcp_done``."""

from __future__ import annotations

from functools import partial
from typing import Any

from rcunet.core.tcp import Closed, DataReceived, Established, TimeWaitEntered
from rcunet.core.tcp import State as CState
from rcunet.core.tcp.timewait import TimeWait
from rcunet.host.tcp import errq as tcp_errq
from rcunet.host.tcp.common import TABLE_STATE
from rcunet.host.tcp.life import FINISHED, UNHASHED, USER_CLOSED, advance
from rcunet.host.tcp.sock import TIMER_DEFERRED, TcpSock, Teardown
from rcunet.sync.deferred import Buffer
from rcunet.sync.hooks import yield_point
from rcunet.wire import tcp


class EngineMixin:
    """``TcpLayer``'s engine calls and teardown."""

    host: Any
    hashinfo: Any
    deferred: Any

    def deliver_bh_locked(self, sk: TcpSock, item: tuple[tcp.Repr, Buffer | None]) -> bool:
        """tcp_v4_do_rcv from a receive worker (``slock`` held, not owned; the caller took
        the legacy global lock) for ``item`` = (segment, its buffer): True when the
        socket's waiters are to be woken once slock is released (the socket lock's
        ``process_bh``, called by ``SocketLock.bh_deliver``)."""
        seg, buf = item
        conn = sk.conn
        if conn is None:
            self._free(buf)
            return False
        conn.on_segment(seg, self.host.now())
        return self.after_engine(sk, buf, wake=False)

    def process_segment_locked(self, sk: TcpSock, seg: tcp.Repr, buf: Buffer | None) -> None:
        """sk_backlog_rcv: one segment under the socket lock (slock or the owner)."""
        conn = sk.conn
        if conn is None:
            self._free(buf)
            return
        legacy = self._input_global(sk, seg)  # the owner holds no slock (release_sock)
        if legacy is not None:
            legacy.acquire()
        try:
            conn.on_segment(seg, self.host.now())
            self.after_engine(sk, buf)
        finally:
            if legacy is not None:
                legacy.release()

    def after_engine(self, sk: TcpSock, buf: Buffer | None = None, wake: bool = True) -> bool:
        """Collect what the engine produced: segments to the outbox, events to the
        socket (wakeups, accept queue, teardown), counters, the timer.  Socket lock held."""
        conn = sk.conn
        if conn is None:
            return False
        segments = conn.take_segments()
        if segments:
            sk.outbox.extend(segments)
        events = conn.take_events()
        for event in events:
            kind = type(event)
            if isinstance(event, DataReceived):
                # Every delivery gets an entry, with a buffer or not: the receive queue
                # keeps views of the delivered bytes (no copy), so a buffer goes back to
                # its pool only once all the bytes delivered with it were read
                # (TcpSock._consume_skbs counts them off in delivery order).
                sk.rx_skbs.append([buf, event.length])
                buf = None
            elif kind is Established:
                if sk.listener is not None:
                    self._publish_child(sk)
                elif sk.tfo_listener is not None:
                    self.fastopen_release(sk)  # reqsk_fastopen_remove
                elif conn.fastopen_active is not None:
                    self.fastopen_synack_seen(sk, conn)  # tcp_fastopen_cache_set
            elif kind is TimeWaitEntered:
                sk.teardown = Teardown.TIME_WAIT
                sk.time_wait = TimeWait.of(conn)
            elif kind is Closed:
                if sk.teardown is None:
                    sk.teardown = Teardown.CLOSE
        if buf is not None:
            self.deferred.free(buf, buf.owner)
        if not sk.life & FINISHED:  # atomic: one load; FINISHED is taken in post
            sk.state = TABLE_STATE[conn.state]
        if conn.counters.values:  # a dict's truth: no take() when nothing was counted
            # the engine's counts to the host's: Counters.inc per name, with the shard
            # fetched once (most engine calls count something)
            shard = self.host.counters.shard()
            for name, n in conn.counters.take().items():
                shard[name] = shard.get(name, 0) + n  # owner: this thread only
        # MSG_ZEROCOPY completions, transmit timestamps: sk_error_report
        reported = (sk.zc is not None or sk.ts is not None) and tcp_errq.collect(
            sk, conn, segments)
        if (events or reported) and wake:
            sk.wakeup()
        elif sk.poll is not None:
            sk.update_poll()
        self.arm_timer_locked(sk)
        # the caller wakes the socket after unlocking
        return (bool(events) or reported) and not wake

    def update_options_locked(self, sk: TcpSock, push: bool = False) -> None:
        """setsockopt reached a live connection: the engine takes the socket's options
        (``Connection.update_options``: keep-alive timer, what Nagle held), then what it
        produced is collected.  Socket lock held."""
        conn = sk.conn
        if conn is None or conn.state is CState.CLOSED:
            return
        conn.update_options(self.host.now(), push, **sk.live_options())
        self.after_engine(sk)

    def disconnect(self, sk: TcpSock) -> None:
        """connect(AF_UNSPEC) on a connection, Linux tcp_disconnect: the engine drops the
        connection (RST where due); the teardown after the unlock unhashes it and frees
        its port (and its place in a Fast Open queue), and connect() may start anew."""
        unread: list[Buffer] = []
        since = sk._lock()
        try:
            conn = sk.conn
            if conn is not None and conn.state is not CState.CLOSED:
                conn.disconnect(self.host.now())
                self.after_engine(sk)
            sk.shutdown_rd = False
            unread = [skb[0] for skb in sk.rx_skbs if skb[0] is not None]
            sk.rx_skbs.clear()
        finally:
            sk._unlock(since)
        self.free_buffers_deferred(unread)

    def post(self, sk: TcpSock) -> None:
        """After a socket-lock section: transmit, then any teardown the engine asked for
        (only when nobody owns the socket; the owner's own ``post`` does it)."""
        if sk.outbox:
            self.flush(sk)
        if sk.teardown is not None and not sk.sl.owned:  # atomic loads; re-checked below
            with sk.sl.slock:
                if sk.sl.owned:
                    return
                todo, sk.teardown = sk.teardown, None
                tw_state = sk.time_wait
                # One teardown per connection: between taking TIME_WAIT here and its
                # hashdance, sk is still hashed, and another thread's segment (a RST
                # answering our ACK of a retransmitted FIN) can make the engine ask for
                # a close too.  Linux has no such window (tcp_time_wait runs under the
                # socket lock); the later request is dropped, as RFC 1337 would drop
                # that RST in TIME_WAIT.  Whoever takes FINISHED (``advance``: once)
                # does the teardown.
                if todo is not None and not advance(sk, FINISHED):
                    todo = None
            if todo is not None:
                if todo is Teardown.TIME_WAIT and tw_state is not None:
                    self._enter_time_wait(sk, tw_state)
                else:
                    self._finish(sk)

    def arm_timer_locked(self, sk: TcpSock) -> None:
        """One host timer per connection at the engine's next deadline.  A later deadline
        keeps the armed (earlier) timer, which fires, finds nothing due and re-arms
        (Linux's sk_reset_timer is as lazy); only an earlier one schedules anew."""
        conn = sk.conn
        if sk.life & FINISHED or conn is None:  # atomic: one load, paired with post's
            return
        at = conn.timers.next_at()  # conn.next_deadline(), one call less per segment
        if at is None:
            return
        timer = sk.timer
        if timer is not None and not timer.cancelled and timer.at <= at:
            return
        if timer is not None:
            timer.cancel()
        sk.timer = self.host.timers.schedule(at, partial(self._timer_fired, sk))

    def _timer_fired(self, sk: TcpSock, now: int) -> None:
        sk.sl.bh_defer(TIMER_DEFERRED, partial(self.run_timer_locked, sk))
        self.post(sk)

    def run_timer_locked(self, sk: TcpSock) -> None:
        now = self.host.now()
        timer = sk.timer
        if timer is not None and timer.at <= now:
            sk.timer = None
        conn = sk.conn
        if sk.life & FINISHED or conn is None:  # atomic: one load, paired with post's
            return
        due = conn.next_deadline()
        if due is not None and due <= now:
            conn.on_timer(now)
            self.after_engine(sk)
        else:
            self.arm_timer_locked(sk)

    def _cancel_timer(self, sk: TcpSock) -> None:
        timer, sk.timer = sk.timer, None
        if timer is not None:
            timer.cancel()

    def _finish(self, sk: TcpSock) -> None:
        """tcp_done: the connection reached CLOSED; unhash it and release its port.
        ``post`` took FINISHED when it took this teardown."""
        self.flush(sk)  # releases the pinned route (or leaves it to the transmitter)
        self._cancel_timer(sk)
        yield_point("tcp.finish.before_unhash")  # FINISHED taken, still in the tables
        with self._global():
            self.hashinfo.close(sk)
        self._leave_syn_queue(sk)
        if sk.tfo_listener is not None:
            self.fastopen_release(sk)
        advance(sk, UNHASHED)  # before reading USER_CLOSED: see TcpSock.close
        sk.wakeup()
        if sk.life & USER_CLOSED:  # atomic: see TcpSock.close, which pairs with this
            self.forget(sk)

    def _leave_syn_queue(self, sk: TcpSock) -> None:
        """An embryonic child died before its handshake completed: nobody will accept
        it, so it is released like an orphan."""
        listener = sk.listener
        if listener is None:
            return
        sk.listener = None
        with listener.rskq_lock:
            if sk in listener.embryos:
                listener.embryos.discard(sk)
                listener.syn_qlen -= 1
        advance(sk, USER_CLOSED)
