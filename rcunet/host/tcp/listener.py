"""The listener (Linux's request-socket design, FreeBSD's "fully initialised" rule of
seed 004): a SYN creates a child socket in SYN_RECV that lives in ehash and counts in the
listener's SYN queue; the child is appended to the accept queue only when the handshake
completed (``publish_child``), so ``accept`` needs only the listener's ``rskq_lock``.
No socket lock on the listener (Linux >= 4.4).  SYN cookies when the SYN queue overflows
(``rcunet.core.tcp.syncookies``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcunet.core.tcp import Connection, Counters, ListenAction, listen_action, syncookies
from rcunet.core.tcp import State as CState
from rcunet.core.tcp.isn import initial_sequence
from rcunet.host.ip import Delivery
from rcunet.host.tcp import connopts, md5
from rcunet.host.tcp.common import family_form
from rcunet.host.tcp.life import FINISHED, LISTEN_CLOSED, UNHASHED, USER_CLOSED, advance
from rcunet.host.tcp.sock import TcpSock
from rcunet.sync.hooks import yield_point
from rcunet.wire import tcp

if TYPE_CHECKING:
    from rcunet.host.tcp.layer import TcpLayer

#: Syncookie ACKs are checked only this long after the SYN queue last overflowed.
COOKIE_WINDOW = 2 * 60 * 1_000_000_000


class Listeners:
    """The Host's listeners: their SYN and accept queues, children and SYN cookies.
    Holds no state of its own: each listener's queues are its own, guarded by its
    rskq_lock."""

    def __init__(self, layer: TcpLayer) -> None:
        self.layer = layer
        self.host = layer.host
        self.hashinfo = layer.hashinfo
        self.secret = layer.secret
        self.transmit = layer.transmit
        self.fastopen = layer.fastopen
        self.global_lock = layer.global_lock

    def acceptq_full(self, listener: TcpSock) -> bool:
        # sk_acceptq_is_full: len > max; lockless read of a deque length (one load).
        return len(listener.acceptq) > listener.max_ack_backlog

    def input(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery, *, iss: int = 0,
                      counted: bool = False) -> None:
        """tcp_v4_rcv for a LISTEN socket: no socket lock on the listener (Linux >= 4.4)."""
        counters = self.host.counters
        if not counted:
            counters.inc("TcpInSegs")
        action = listen_action(seg)
        if action is ListenAction.DROP:
            return
        if action is ListenAction.RESET:
            if not (seg.flags & tcp.ACK and self._cookie_ack(lsk, seg, info)):
                # tcp_v4_send_reset with the listener: signed with its key for the peer
                self.transmit.reply_reset(seg, info, lsk.md5_keys)
            return
        tuning = self.host.tuning
        with lsk.rskq_lock:
            qlen, max_backlog = lsk.syn_qlen, lsk.max_ack_backlog
            closed = lsk.life & LISTEN_CLOSED
        if closed:
            return
        want_cookie = False
        if (tuning.tcp_syncookies == 2 or qlen >= max(max_backlog, 1)
                or qlen >= tuning.tcp_max_syn_backlog):
            if not tuning.tcp_syncookies:
                counters.inc("TcpExtTCPReqQFullDrop")
                counters.inc("TcpExtListenDrops")
                return
            want_cookie = True
            if tuning.tcp_syncookies != 2:
                counters.inc("TcpExtTCPReqQFullDoCookies")
        if self.acceptq_full(lsk):
            counters.inc("TcpExtListenOverflows")
            counters.inc("TcpExtListenDrops")
            return
        max_syn = tuning.tcp_max_syn_backlog
        if not want_cookie and not tuning.tcp_syncookies and max_syn - qlen < max_syn >> 2:
            counters.inc("TcpExtListenDrops")
            return
        if want_cookie:
            self._send_cookie(lsk, seg, info)
            return
        with self.global_lock():
            child = self._new_child(lsk, seg, info, iss)
        if child is not None:
            child.post()  # transmit outside every lock (an inline link re-enters)

    def _child_options(self, lsk: TcpSock, info: Delivery) -> tuple[int, int, int]:
        """(the MSS to advertise, the MSS a learned path MTU allows, the TSval offset) of
        a child answering ``info``'s peer: the SYN-ACK advertises the route's MSS
        (dst_metric_advmss) while the child sends at most the path's (tcp_v4_syn_recv_sock
        -> tcp_sync_mss(dst_mtu))."""
        ts_offset = self.layer.ts_offset(info.dst, info.src)
        mtu = info.iface.mtu
        headers = 40 if len(info.dst) == 4 else 60
        path_mtu = self.host.pmtu.path_mtu(info.src, mtu, self.host.now())
        return mtu - headers, path_mtu - headers, ts_offset

    def _send_cookie(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery) -> None:
        mss, path_mss, ts_offset = self._child_options(lsk, info)
        now = self.host.now()
        engine_counters = Counters()
        reply = syncookies.syn_ack_for(
            seg, secret=self.secret, saddr=info.src, daddr=info.dst, now=now,
            options=connopts.conn_options(lsk, mss, info.src, path_mss), ts_offset=ts_offset,
            counters=engine_counters)
        lsk.note_overflow(now)
        for name, n in engine_counters.take().items():
            self.host.counters.inc(name, n)
        self.transmit.reply(reply, info, lsk.md5_keys)  # tcp_make_synack signs it too

    def _cookie_ack(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery) -> bool:
        """cookie_v4_check: an ACK to a listener that recently sent cookies may complete
        a stateless handshake.  True when it was taken (or dropped for a full queue)."""
        if not self.host.tuning.tcp_syncookies:
            return False
        now = self.host.now()
        since = lsk.last_overflow_at  # atomic: one attribute load
        if since is None or now - since > COOKIE_WINDOW:
            return False
        mss, path_mss, ts_offset = self._child_options(lsk, info)
        engine_counters = Counters()
        if self.acceptq_full(lsk):
            self.host.counters.inc("TcpExtListenOverflows")
            self.host.counters.inc("TcpExtListenDrops")
            return True
        conn = syncookies.connection_from_ack(
            seg, secret=self.secret, saddr=info.src, daddr=info.dst, now=now,
            options=connopts.conn_options(lsk, mss, info.src, path_mss), ts_offset=ts_offset,
            counters=engine_counters)
        for name, n in engine_counters.take().items():
            self.host.counters.inc(name, n)
        if conn is None:
            return False
        with self.global_lock():
            child = self._adopt_child(lsk, conn, info, seg.src_port)
        if child is not None:
            child.post()
        return True

    def _new_child(self, lsk: TcpSock, seg: tcp.Repr, info: Delivery,
                   iss: int) -> TcpSock | None:
        """A SYN that fits the SYN queue: a child socket in SYN_RECV answering SYN,ACK."""
        mss, path_mss, ts_offset = self._child_options(lsk, info)
        now = self.host.now()
        if not iss:
            iss = initial_sequence(self.secret, info.dst, seg.dst_port, info.src,
                                   seg.src_port, now)
        child = self._make_child(lsk, info)
        decision = self.fastopen.decision(lsk, seg, info)
        conn = Connection.accept_syn(
            seg, iss=iss, now=now, options=connopts.conn_options(child, mss, info.src, path_mss),
            ts_offset=ts_offset,
            counters=Counters(), fastopen=decision.fastopen,
            synack_options=(decision.reply,) if decision.reply is not None else ())
        return self._adopt_child(lsk, conn, info, seg.src_port, child,
                                 fastopen=decision.fastopen)

    def _make_child(self, lsk: TcpSock, info: Delivery) -> TcpSock:
        """A child socket with its listener's options (sk_clone_lock) and its MD5 key
        for the peer (tcp_v4_syn_recv_sock -> tcp_md5_key_copy)."""
        child = TcpSock(self.layer, lsk.family)
        connopts.inherit_from(child, lsk)
        child.md5_keys = md5.child_keys(lsk.md5_keys, info.src)  # atomic: a load
        return child

    def _adopt_child(self, lsk: TcpSock, conn: Connection, info: Delivery, fport: int,
                     child: TcpSock | None = None, fastopen: bool = False) -> TcpSock | None:
        """Give the child its identity and port, count it in the SYN queue, publish it in
        ehash, then let it run (a cookie child is ESTABLISHED already and goes straight
        on to the accept queue).  The caller transmits (``post``) after its locks.

        A Fast Open child counts in the listener's Fast Open queue instead, and goes on
        to the accept queue at once, in SYN_RECV (tcp_fastopen_create_child)."""
        if child is None:
            child = self._make_child(lsk, info)
        child.set_key(family_form(lsk.family, info.dst), lsk.lport,
                      family_form(lsk.family, info.src), fport)
        child.attach(conn, tx_csum_offload=self.transmit.offload(info.src))
        if not lsk.queue_child(child, fastopen=fastopen):
            return None
        self.layer.track(child)
        yield_point("tcp.child.before_hash")
        if not self._inherit_port(child, lsk) or not self.hashinfo.ehash.insert(child):
            self.hashinfo.bind.unbind(child)
            advance(child, USER_CLOSED)
            self.leave_syn_queue(child)
            self.fastopen.release(child)
            advance(child, FINISHED)
            advance(child, UNHASHED)
            self.layer.forget(child)
            return None
        with child.sl.slock:
            child.engine()  # the SYN,ACK attach left to collect
            if fastopen:
                self._enqueue_fastopen_child(lsk, child)
        return child

    def _enqueue_fastopen_child(self, lsk: TcpSock, child: TcpSock) -> None:
        """inet_csk_reqsk_queue_add for a Fast Open child (its socket lock held): it is
        acceptable before its handshake completes, with the SYN's data readable."""
        if not lsk.publish(child):  # the listener closed meanwhile: nobody will accept it
            self._abort_unaccepted(child)
            return
        lsk.wakeup()

    def _abort_unaccepted(self, child: TcpSock) -> None:
        """A child whose listener closed before it reached the accept queue: nobody will
        accept it, so it is an orphan, reset (inet_csk_listen_stop's abort).  The child's
        socket lock held."""
        advance(child, USER_CLOSED)
        conn = child.conn
        if conn is not None:
            child.engine(conn.abort, self.host.now())

    def _inherit_port(self, child: TcpSock, lsk: TcpSock) -> bool:
        """__inet_inherit_port (``BindTables.inherit_port``): the child joins the
        listener's bind bucket; False when the listener's port is gone."""
        try:
            self.hashinfo.bind.inherit_port(lsk, child)
        except OSError:
            return False
        return True

    def publish_child(self, child: TcpSock) -> None:
        """The handshake completed (child's socket lock held): now, and only now, the
        child is visible to accept() (seed 004)."""
        lsk = child.listener
        if lsk is None:
            return
        yield_point("tcp.child.before_publish")  # complete, not yet acceptable
        if not lsk.publish(child):
            self._abort_unaccepted(child)
            return
        lsk.wakeup()

    def accept(self, lsk: TcpSock) -> TcpSock | None:
        """inet_csk_accept: take a complete child.  Modern: only the listener's
        rskq_lock.  Legacy (seed 004 before): under the global tcbinfo lock as well."""
        with self.global_lock():
            child = lsk.accept_pop()
        if child is not None and lsk.poll is not None:
            lsk.update_poll()
        return child

    def close(self, lsk: TcpSock, *, forget: bool) -> None:
        """Stop listening: unhash, abort queued and embryonic children (RST)."""
        children = lsk.stop_listening()
        since = lsk._lock()
        try:
            with self.global_lock():
                self.hashinfo.close(lsk)
            advance(lsk, FINISHED)
            advance(lsk, UNHASHED)
        finally:
            lsk._unlock(since)
        for child in children:
            self.abort_orphan(child)
        lsk.wakeup()
        if forget:
            self.layer.forget(lsk)

    def abort_orphan(self, sk: TcpSock, spare_fin_wait2: bool = False) -> None:
        """Abort a connection its program has closed.  ``spare_fin_wait2`` (a Host
        shutting down): one in FIN-WAIT-2 ends as its timeout would, without a RST."""
        since = sk._lock()
        try:
            advance(sk, USER_CLOSED)
            conn = sk.conn
            if conn is not None and conn.state is not CState.CLOSED:
                if spare_fin_wait2 and conn.state is CState.FIN_WAIT_2:
                    sk.engine(conn.expire_fin_wait2, self.host.now())
                else:
                    sk.engine(conn.abort, self.host.now())
        finally:
            sk._unlock(since)
        # atomic: loads of life and conn.  We took USER_CLOSED before reading UNHASHED; a
        # teardown takes UNHASHED before reading USER_CLOSED (both under wq), so one of
        # us forgets sk, and only once it is out of the tables (see TcpSock.close).
        life = sk.life
        if life & UNHASHED:
            self.layer.forget(sk)
        elif not life & FINISHED and (sk.conn is None or sk.conn.state is CState.CLOSED):
            if advance(sk, FINISHED):  # nobody took the teardown: it is ours
                self.layer.teardown.run(sk, None)  # forgets sk: USER_CLOSED is taken

    def leave_syn_queue(self, sk: TcpSock) -> None:
        """An embryonic child died before its handshake completed: nobody will accept
        it, so it is released like an orphan."""
        if sk.leave_syn_queue():
            advance(sk, USER_CLOSED)
