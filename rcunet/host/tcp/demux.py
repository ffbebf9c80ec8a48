"""TCP receive demultiplexing (Linux ``tcp_v4_rcv`` / ``tcp_v6_rcv``), a receive worker:

1. parse; verify the checksum unless the interface offloads it (clean in-memory links);
2. look the 4-tuple up in ehash with no lock (pinned, re-checked: ``EstablishedTable``);
   an IPv4 miss retries the v4-mapped form (dual-stack sockets);
3. a socket: ``SocketLock.bh_deliver`` processes the segment under ``slock`` or, while a
   user thread owns the socket, appends it to the backlog that ``release_sock`` drains;
   a TIME_WAIT entry: ``TimeWaitMixin._tw_input``; nothing: the listener table
   (``ListenerMixin._listen_input``); nothing again: RST.
"""

from __future__ import annotations

from typing import Any

from rcunet.host.ip import Delivery
from rcunet.host.tcp.common import MAPPED
from rcunet.host.tcp.timewait import TcpTimeWait
from rcunet.host.tcp_sock import SEGMENT_OVERHEAD, TcpSock
from rcunet.sync.deferred import Buffer
from rcunet.tables.ehash import put_entry
from rcunet.tables.entry import TableEntry
from rcunet.wire import ecn, tcp
from rcunet.wire.errors import WireError


class DemuxMixin:
    """``TcpLayer``'s receive path (no lock until the socket's)."""

    host: Any
    hashinfo: Any

    def input(self, info: Delivery, payload: memoryview) -> None:
        if info.to_multicast:
            return  # tcp_v4_rcv: only PACKET_HOST (never answer a broadcast with a RST)
        offload = info.iface.checksum_offload
        buf: Buffer | None = None
        view = payload
        n = len(payload)
        if n > 20 and n > (payload[12] >> 4) << 2:  # carries data: copy it into an skb
            buf, view = self._alloc_skb(payload)
        try:
            seg = tcp.Repr.parse(view) if offload else tcp.Repr.parse(view, info.src, info.dst)
        except WireError:
            self.host.counters.inc("TcpInErrs")
            self._free(buf)
            return
        if seg.checksum_ok is False:
            self.host.counters.inc("TcpInCsumErrors")
            self.host.counters.inc("TcpInErrs")
            self._free(buf)
            return
        codepoint = ecn.of_packet(info.packet)
        if codepoint:  # the engine reads the IP ECN field from the segment (INET_ECN_*)
            seg = seg._replace(ecn=codepoint)
        src, dst, ifindex = info.src, info.dst, info.iface.ifindex
        found = self._lookup_established(dst, seg.dst_port, src, seg.src_port, ifindex)
        if found is not None:
            try:
                if isinstance(found, TcpSock):
                    self._deliver(found, seg, buf)
                    buf = None
                elif isinstance(found, TcpTimeWait):
                    self._tw_input(found, seg, info)
            finally:
                put_entry(found)
                self._free(buf)
            return
        try:
            listener = self.hashinfo.listen.lookup(dst, seg.dst_port, src, seg.src_port,
                                                   dif=ifindex)
            if isinstance(listener, TcpSock):
                self._listen_input(listener, seg, info)
            else:
                self._no_socket(seg, info)
        finally:
            self._free(buf)

    def _lookup_established(self, laddr: bytes, lport: int, faddr: bytes, fport: int,
                            dif: int) -> TableEntry | None:
        ehash = self.hashinfo.ehash
        found = ehash.lookup(laddr, lport, faddr, fport, dif)
        if found is None and len(laddr) == 4:  # a dual-stack IPv6 socket keys v4-mapped
            found = ehash.lookup(MAPPED + laddr, lport, MAPPED + faddr, fport, dif)
        return found

    def _deliver(self, sk: TcpSock, seg: tcp.Repr, buf: Buffer | None) -> None:
        listener = sk.listener
        if (listener is not None and seg.flags & tcp.ACK and not seg.flags & (tcp.SYN | tcp.RST)
                and self._acceptq_full(listener)):
            # tcp_check_req: the handshake cannot complete into a full accept queue; the
            # child stays in SYN_RECV and the peer retransmits.
            self.host.counters.inc("TcpExtListenOverflows")
            self.host.counters.inc("TcpExtListenDrops")
            self._free(buf)
            return
        legacy = self._input_global(sk, seg)  # taken outside slock: the outermost lock
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
        self.post(sk)
