"""The one teardown of a TCP connection (Linux ``tcp_done`` and ``tcp_time_wait``): the
socket's ``post`` claims it (taking FINISHED) once the engine asked for it, and
``Teardown.run`` does the rest, for a close and for TIME_WAIT alike: the last transmit,
the timer, the tables (unhashed, or replaced by a TIME_WAIT entry), the SYN queue or the
Fast Open queue the socket still counted in, then UNHASHED and the last reference."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcunet.core.tcp.timewait import TimeWait
from rcunet.host.tcp.life import UNHASHED, USER_CLOSED, advance
from rcunet.host.tcp.sock import TcpSock
from rcunet.sync.hooks import yield_point

if TYPE_CHECKING:
    from rcunet.host.tcp.layer import TcpLayer


class Teardown:
    """``TcpLayer``'s teardown; holds no state (what it tears down is the socket's)."""

    def __init__(self, layer: TcpLayer) -> None:
        self.layer = layer
        self.hashinfo = layer.hashinfo
        self.transmit = layer.transmit
        self.timewaits = layer.timewaits
        self.listeners = layer.listeners
        self.fastopen = layer.fastopen
        self.global_lock = layer.global_lock

    def run(self, sk: TcpSock, time_wait: TimeWait | None) -> None:
        """tcp_done (``time_wait`` None: the connection reached CLOSED; unhash it and
        release its port) or tcp_time_wait (a TIME_WAIT entry with ``time_wait``'s state
        takes its place: ``TimeWaits.enter``).  ``post`` took FINISHED when it claimed
        the teardown, or the caller did."""
        self.transmit.flush(sk)  # releases the pinned route (or leaves it to the transmitter)
        sk.cancel_timer()
        yield_point("tcp.finish.before_unhash")  # FINISHED taken, still in the tables
        if time_wait is None:
            with self.global_lock():
                self.hashinfo.close(sk)
        else:
            self.layer.sync_tuning()  # tcp_max_tw_buckets as the Host has it now
            self.timewaits.enter(sk, time_wait)
        self.listeners.leave_syn_queue(sk)
        # reqsk_fastopen_remove: a Fast Open child that dies before its handshake
        # completed gives its place in the listener's Fast Open queue back, whichever
        # way it dies
        self.fastopen.release(sk)
        advance(sk, UNHASHED)  # before reading USER_CLOSED: see TcpSock.close
        sk.wakeup()
        if sk.life & USER_CLOSED:  # atomic: see TcpSock.close, which pairs with this
            self.layer.forget(sk)
