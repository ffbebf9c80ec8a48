"""The one teardown of a TCP connection (Linux ``tcp_done`` and ``tcp_time_wait``): the
socket's ``post`` claims it (taking FINISHED) once the engine asked for it, and
``Teardown.run`` does the rest, for a close and for TIME_WAIT alike: the last transmit,
the timer, the tables (unhashed, or replaced by a TIME_WAIT entry), the SYN queue or the
Fast Open queue the socket still counted in, then UNHASHED and the last reference."""

from __future__ import annotations

from functools import partial
from typing import Any

from rcunet.core.tcp.timewait import TimeWait
from rcunet.host.tcp.life import UNHASHED, USER_CLOSED, advance
from rcunet.host.tcp.sock import TcpSock
from rcunet.host.tcp.timewait import TcpTimeWait
from rcunet.sync.hooks import yield_point


class TeardownMixin:
    """``TcpLayer``'s teardown."""

    host: Any
    hashinfo: Any

    def teardown(self, sk: TcpSock, time_wait: TimeWait | None) -> None:
        """tcp_done (``time_wait`` None: the connection reached CLOSED; unhash it and
        release its port) or tcp_time_wait (a light TcpTimeWait entry replaces sk in
        ehash and among its port's owners in one publication,
        ``TcpHashInfo.time_wait``).  ``post`` took FINISHED when it took the teardown."""
        self.flush(sk)  # releases the pinned route (or leaves it to the transmitter)
        sk.cancel_timer()
        yield_point("tcp.finish.before_unhash")  # FINISHED taken, still in the tables
        if time_wait is None:
            with self._global():
                self.hashinfo.close(sk)
        else:
            self.sync_tuning()  # tcp_max_tw_buckets as the Host has it now
            tw = TcpTimeWait(sk, time_wait, now=self.host.now())
            with self._global():
                if self.hashinfo.time_wait(sk, entry=tw) is not None:
                    tw.timer = self.host.timers.schedule(tw.expires_at,
                                                         partial(self._tw_expired, tw))
        self._leave_syn_queue(sk)
        # reqsk_fastopen_remove: a Fast Open child that dies before its handshake
        # completed gives its place in the listener's Fast Open queue back, whichever
        # way it dies
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
