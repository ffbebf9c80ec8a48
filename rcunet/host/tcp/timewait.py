"""TIME_WAIT on a Host (Linux ``tcp_time_wait``, ``inet_twsk_*``): a light entry replaces
the socket in ehash and among its port's owners; segments that reach it follow the rules
of ``rcunet.core.tcp.timewait.TimeWait`` (the one copy of them)."""

from __future__ import annotations

from typing import Any

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.timewait import TimeWait, TwAction
from rcunet.host.ip import Delivery
from rcunet.host.tcp.sock import TcpSock
from rcunet.tables.entry import TableEntry, TimeWaitEntry
from rcunet.wire import tcp


class TcpTimeWait(TimeWaitEntry):
    """A TIME_WAIT entry with what answering the old peer needs (``tcp_timewait_sock``):
    the protocol state ``tw`` (immutable) and the expiry timer."""

    __slots__ = lockfree_read_slots("tw", "timer", base=TimeWaitEntry)

    def __init__(self, sk: TableEntry, tw: TimeWait, *, now: int) -> None:
        super().__init__(sk, now=now, expires_at=now + tw.timeout, snd_nxt=tw.snd_nxt,
                         ts_recent=tw.ts_recent, ts_recent_stamp=tw.ts_recent_stamp)
        self.tw = tw
        self.timer: Any = None


class TimeWaitMixin:
    """``TcpLayer``'s TIME_WAIT entries."""

    host: Any
    hashinfo: Any

    def _tw_expired(self, tw: TcpTimeWait, now: int) -> None:
        with self._global():
            self.hashinfo.tw_kill(tw)

    def _tw_kill(self, tw: TcpTimeWait) -> bool:
        if tw.timer is not None:
            tw.timer.cancel()
        with self._global():
            return self.hashinfo.tw_kill(tw)

    def _tw_input(self, tw: TcpTimeWait, seg: tcp.Repr, info: Delivery) -> None:
        """A segment reached a TIME_WAIT entry: ``TimeWait.action`` says what to do."""
        self.host.counters.inc("TcpInSegs")
        state = tw.tw
        action = state.action(seg)
        if action is TwAction.KILL:
            self._tw_kill(tw)
            return
        if action is TwAction.REOPEN:
            if self._tw_kill(tw):  # else another segment took it first: ACK this SYN
                listener = self.hashinfo.listen.lookup(info.dst, seg.dst_port, info.src,
                                                       seg.src_port, dif=info.iface.ifindex)
                if isinstance(listener, TcpSock):
                    self._listen_input(listener, seg, info, iss=state.reuse_iss(),
                                       counted=True)
                else:
                    self._reply_reset(seg, info)
                return
            action = TwAction.ACK
        if action is TwAction.ACK:
            self._reply(state.ack_for(seg, self.host.now()), info)
