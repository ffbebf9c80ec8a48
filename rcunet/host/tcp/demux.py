"""TCP receive demultiplexing (Linux ``tcp_v4_rcv`` / ``tcp_v6_rcv``), a receive worker:

1. parse; verify the checksum unless the interface offloads it (clean in-memory links);
2. look the 4-tuple up in ehash with no lock (pinned, re-checked: ``EstablishedTable``);
   an IPv4 miss retries the v4-mapped form (dual-stack sockets);
3. a socket: ``SocketLock.bh_deliver`` processes the segment under ``slock`` or, while a
   user thread owns the socket, appends it to the backlog that ``release_sock`` drains;
   a TIME_WAIT entry: ``TimeWaits.input``; nothing: the listener table
   (``Listeners.input``); nothing again: RST.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rcunet.host.ip import Delivery
from rcunet.host.tcp import md5
from rcunet.host.tcp.sock import SEGMENT_OVERHEAD, TcpSock
from rcunet.host.tcp.timewait import TcpTimeWait
from rcunet.sync.deferred import Buffer
from rcunet.tables.ehash import put_entry
from rcunet.tables.entry import TableEntry
from rcunet.wire import ecn, tcp
from rcunet.wire.addr import v4mapped
from rcunet.wire.errors import WireError

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.tcp.buffers import RxBuffers
    from rcunet.host.tcp.listener import Listeners
    from rcunet.host.tcp.timewait import TimeWaits
    from rcunet.host.tcp.transmit import Transmit
    from rcunet.tables import TcpHashInfo

#: ``TcpLayer.legacy_input_lock``: the global lock a segment takes in legacy, or None.
LegacyInputLock = Callable[[TcpSock, tcp.Repr], Any]


class Demux:
    """The Host's TCP receive path (no lock until the socket's); holds no state."""

    def __init__(self, host: Host, hashinfo: TcpHashInfo, buffers: RxBuffers,
                 transmit: Transmit, timewaits: TimeWaits, listeners: Listeners,
                 legacy_input_lock: LegacyInputLock) -> None:
        self.host = host
        self.hashinfo = hashinfo
        self.buffers = buffers
        self.transmit = transmit
        self.timewaits = timewaits
        self.listeners = listeners
        self.legacy_input_lock = legacy_input_lock

    def input(self, info: Delivery, payload: memoryview) -> None:
        if info.to_multicast:
            return  # tcp_v4_rcv: only PACKET_HOST (never answer a broadcast with a RST)
        offload = info.iface.checksum_offload
        buf: Buffer | None = None
        view = payload
        n = len(payload)
        if n > 20 and n > (payload[12] >> 4) << 2:  # carries data: copy it into an skb
            buf, view = self.buffers.alloc(payload)
        try:
            seg = tcp.Repr.parse(view) if offload else tcp.Repr.parse(view, info.src, info.dst)
        except WireError:
            self.host.counters.inc("TcpInErrs")
            self.buffers.free_maybe(buf)
            return
        if seg.checksum_ok is False:
            self.host.counters.inc("TcpInCsumErrors")
            self.host.counters.inc("TcpInErrs")
            self.buffers.free_maybe(buf)
            return
        codepoint = ecn.of_packet(info.packet)
        if codepoint:  # the engine reads the IP ECN field from the segment (INET_ECN_*)
            seg = seg._replace(ecn=codepoint)
        src, dst, ifindex = info.src, info.dst, info.iface.ifindex
        found = self.lookup_established(dst, seg.dst_port, src, seg.src_port, ifindex)
        if found is not None:
            try:
                if isinstance(found, TcpSock):
                    keys = found.md5_keys  # atomic: one load (setsockopt's store)
                    if (keys is not None or seg.unknown_options) \
                            and self.md5_drops(keys, seg, view, src, dst):
                        return
                    self.deliver(found, seg, buf)
                    buf = None
                elif isinstance(found, TcpTimeWait):
                    self.timewaits.input(found, seg, info, view)
            finally:
                put_entry(found)
                self.buffers.free_maybe(buf)
            return
        try:
            listener = self.hashinfo.listen.lookup(dst, seg.dst_port, src, seg.src_port,
                                                   dif=ifindex)
            if isinstance(listener, TcpSock):
                keys = listener.md5_keys  # atomic: one load (setsockopt's store)
                if (keys is not None or seg.unknown_options) \
                        and self.md5_drops(keys, seg, view, src, dst):
                    return
                self.listeners.input(listener, seg, info)
            else:
                self.transmit.no_socket(seg, info)
        finally:
            self.buffers.free_maybe(buf)

    def md5_drops(self, keys: md5.Keys | None, seg: tcp.Repr, raw: memoryview,
                  src: bytes, dst: bytes) -> bool:
        """tcp_inbound_hash before the socket sees the segment (TIME_WAIT checks
        nothing): ``md5.drops`` with the Host's counters, and a drop counted in
        TcpInSegs too (tcp_v4_rcv counts every segment before its checks)."""
        if not md5.drops(self.host.counters, keys, seg, raw, src, dst):
            return False
        self.host.counters.inc("TcpInSegs")
        return True

    def lookup_established(self, laddr: bytes, lport: int, faddr: bytes, fport: int,
                            dif: int) -> TableEntry | None:
        ehash = self.hashinfo.ehash
        found = ehash.lookup(laddr, lport, faddr, fport, dif)
        if found is None and len(laddr) == 4:  # a dual-stack IPv6 socket keys v4-mapped
            found = ehash.lookup(v4mapped(laddr), lport, v4mapped(faddr), fport, dif)
        return found

    def deliver(self, sk: TcpSock, seg: tcp.Repr, buf: Buffer | None) -> None:
        listener = sk.listener
        if (listener is not None and seg.flags & tcp.ACK and not seg.flags & (tcp.SYN | tcp.RST)
                and self.listeners.acceptq_full(listener)):
            # tcp_check_req: the handshake cannot complete into a full accept queue; the
            # child stays in SYN_RECV and the peer retransmits.
            self.host.counters.inc("TcpExtListenOverflows")
            self.host.counters.inc("TcpExtListenDrops")
            self.buffers.free_maybe(buf)
            return
        legacy = self.legacy_input_lock(sk, seg)  # taken outside slock: the outermost lock
        if legacy is not None:
            legacy.acquire()
        try:
            woke = sk.sl.bh_deliver((seg, buf), len(seg.payload) + SEGMENT_OVERHEAD)
        finally:
            if legacy is not None:
                legacy.release()
        if woke:
            # After slock is released, so the woken owner does not queue on it (the
            # state it waits for was changed under slock: visible before this bump).
            sk.wakeup()
        sk.post()
