"""TIME_WAIT on a Host (Linux ``tcp_time_wait``, ``inet_twsk_*``): a light entry replaces
the socket in ehash and among its port's owners; segments that reach it follow the rules
of ``rcunet.core.tcp.timewait.TimeWait`` (the one copy of them)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from functools import partial
from typing import TYPE_CHECKING, Any

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.timewait import TimeWait, TwAction
from rcunet.host.ip import Delivery
from rcunet.host.tcp import md5
from rcunet.host.tcp.sock import TcpSock
from rcunet.tables.entry import TableEntry, TimeWaitEntry
from rcunet.wire import tcp

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.tcp.listener import Listeners
    from rcunet.host.tcp.transmit import Transmit
    from rcunet.host.timers import Timer
    from rcunet.tables import TcpHashInfo

#: The legacy global lock, or nothing (``TcpLayer.global_lock``).
GlobalLock = Callable[[], AbstractContextManager[Any]]


class TcpTimeWait(TimeWaitEntry):
    """A TIME_WAIT entry with what answering the old peer needs (``tcp_timewait_sock``):
    the protocol state ``tw`` (immutable) and the expiry timer."""

    __slots__ = lockfree_read_slots("tw", "timer", "md5_keys", base=TimeWaitEntry)

    def __init__(self, sk: TableEntry, tw: TimeWait, *, now: int,
                 md5_keys: md5.Keys | None = None) -> None:
        super().__init__(sk, now=now, expires_at=now + tw.timeout, snd_nxt=tw.snd_nxt,
                         ts_recent=tw.ts_recent, ts_recent_stamp=tw.ts_recent_stamp)
        self.tw = tw
        self.timer: Timer | None = None
        #: The connection's MD5 key (tcp_time_wait_init's copy): its ACKs are signed.
        self.md5_keys = md5_keys


class TimeWaits:
    """The Host's TIME_WAIT entries: made by the teardown, answered by the receive path,
    killed by their timer, a reopening SYN or the Host's shutdown.  The entries live in
    ehash (internally synchronised); this holds no state of its own."""

    def __init__(self, host: Host, hashinfo: TcpHashInfo, global_lock: GlobalLock,
                 transmit: Transmit) -> None:
        self.host = host
        self.hashinfo = hashinfo
        self.global_lock = global_lock
        self.transmit = transmit
        #: A SYN that may reopen a TIME_WAIT goes to the listener (set by TcpLayer).
        self.listeners: Listeners | None = None

    def enter(self, sk: TcpSock, state: TimeWait) -> None:
        """tcp_time_wait's hashdance: a light TcpTimeWait entry replaces sk in ehash and
        among its port's owners in one publication (``TcpHashInfo.time_wait``), and its
        timer is armed (none when tcp_max_tw_buckets is reached)."""
        tw = TcpTimeWait(sk, state, now=self.host.now(),
                         md5_keys=md5.child_keys(sk.md5_keys, sk.faddr))
        with self.global_lock():
            if self.hashinfo.time_wait(sk, entry=tw) is not None:
                tw.timer = self.host.timers.schedule(tw.expires_at,
                                                     partial(self._expired, tw))

    def _expired(self, tw: TcpTimeWait, now: int) -> None:
        with self.global_lock():
            self.hashinfo.tw_kill(tw)

    def kill(self, tw: TcpTimeWait) -> bool:
        if tw.timer is not None:
            tw.timer.cancel()
        with self.global_lock():
            return self.hashinfo.tw_kill(tw)

    def input(self, tw: TcpTimeWait, seg: tcp.Repr, info: Delivery,
              raw: memoryview | None = None) -> None:
        """A segment reached a TIME_WAIT entry: ``TimeWait.action`` says what to do.
        ``raw``, the segment's bytes: a SYN that reopens the entry goes to the listener
        through its MD5 check (tcp_v4_rcv: TCP_TW_SYN, then ``goto process``)."""
        self.host.counters.inc("TcpInSegs")
        state = tw.tw
        action = state.action(seg)
        if action is TwAction.KILL:
            self.kill(tw)
            return
        if action is TwAction.REOPEN:
            if self.kill(tw):  # else another segment took it first: ACK this SYN
                listener = self.hashinfo.listen.lookup(info.dst, seg.dst_port, info.src,
                                                       seg.src_port, dif=info.iface.ifindex)
                if isinstance(listener, TcpSock) and self.listeners is not None:
                    keys = listener.md5_keys  # atomic: one load (setsockopt's store)
                    if raw is not None and (keys is not None or seg.unknown_options) and \
                            md5.drops(self.host.counters, keys, seg, raw, info.src, info.dst):
                        return
                    self.listeners.input(listener, seg, info, iss=state.reuse_iss(),
                                         counted=True)
                else:
                    self.transmit.reply_reset(seg, info)
                return
            action = TwAction.ACK
        if action is TwAction.ACK:
            self.transmit.reply(state.ack_for(seg, self.host.now()), info, tw.md5_keys)
