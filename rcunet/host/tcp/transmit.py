"""TCP transmit: a socket's outbox through its pinned route (Linux ``sk_dst_cache`` and
``__sk_dst_check``), one transmitter per socket at a time, and the per-packet path the
layer's own replies (RST, TIME_WAIT ACK, cookie SYN,ACK) take."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

from rcunet.core.tcp import reset_for
from rcunet.host.ip import Delivery
from rcunet.host.tcp import md5
from rcunet.host.tcp.common import offloads
from rcunet.host.tcp.ipopts import dont_fragment
from rcunet.host.tcp.life import FINISHED
from rcunet.host.tcp.sock import TcpSock
from rcunet.wire import tcp, tcp_md5
from rcunet.wire.addr import LIMITED_BROADCAST, is_multicast, unmapped

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.host.routecache import DstEntry


class Transmit:
    """The Host's TCP output: the sockets' outboxes and the layer's own replies.
    Holds no state of its own: a socket's route is its ``dst``, guarded by its ``xmit``."""

    def __init__(self, host: Host) -> None:
        self.host = host

    def flush(self, sk: TcpSock) -> None:
        """Transmit the outbox.  One transmitter per socket at a time (trylock, like
        qdisc_run): a thread that finds it busy leaves its segments to the holder, which
        loops until the outbox is empty; the outer loop catches a late append.

        The transmitter also owns the socket's pinned route (``sk.dst``, Linux's
        sk_dst_cache): each segment goes out through it while the route cache has not
        been invalidated since (``DstCache.current``), with no lookup and no refcount
        traffic; a stale entry is dropped and looked up again.  Once the socket is
        FINISHED the route is released, by whoever transmits last: a transmitter
        re-checks after letting go of ``xmit`` (the teardown may have found it busy)."""
        outbox = sk.outbox
        xmit = sk.xmit
        # atomic: attribute loads; life pairs with advance(FINISHED) in post
        while outbox or (sk.life & FINISHED and sk.dst is not None):
            if not xmit.acquire(False):
                return
            try:
                if outbox:
                    self._transmit_outbox_xmit(sk, outbox)
                if sk.life & FINISHED:
                    self._drop_route_xmit(sk)
            finally:
                xmit.release()

    def _transmit_outbox_xmit(self, sk: TcpSock, outbox: deque[tcp.Repr]) -> None:
        # one load of the key: a connected socket's addresses no longer change
        laddr, _lport, faddr, _fport = sk.key
        src = unmapped(laddr)
        dst = unmapped(faddr)
        offload = sk.tx_csum_offload
        checksum = not offload
        output_pinned = self.host.ip.output_pinned
        # IP_TOS and IP_MTU_DISCOVER shape IPv4 headers only (IPv6 has IPV6_TCLASS and
        # never fragments on the way); each one attribute load (atomic) per flush
        if len(dst) == 4:
            tos, df = sk.tos, dont_fragment(sk.pmtudisc)
        else:
            tos, df = 0, True
        # The only consumer (``sk.xmit`` held): a non-empty outbox stays non-empty until
        # this loop pops it; an append racing the last pop is the caller's next round.
        while outbox:  # atomic: deque length
            seg = outbox.popleft()  # atomic: deque.popleft
            keys = sk.md5_keys  # atomic: one load, pairs with setsockopt's store
            if keys is not None:
                seg = sign(seg, keys, src, dst)
            route = sk.dst
            if route is None or not self._keeps(sk, route, dst):
                route = self._route_xmit(sk, dst)
            if route is None:
                self.segment(src, dst, seg, sk.bound_dev, offload,
                             df=df, tos=tos)
            else:
                # the header and the payload go to IP apart (one join makes the frame);
                # path MTU discovery: never fragmented on the way (see segment)
                output_pinned(route, src, dst, tcp.PROTOCOL,
                              seg.build_header(src=src, dst=dst, checksum=checksum),
                              seg.payload, dont_fragment=df, tos=tos | seg.ecn)

    def _route_xmit(self, sk: TcpSock, dst: bytes) -> DstEntry | None:
        """__sk_dst_check: the socket's pinned route to ``dst`` if it is still current,
        else a fresh one (pinned: the lookup's reference becomes the socket's); None for
        a finished socket, a local or multicast destination, or no route (those segments
        take the per-packet path).  ``sk.xmit`` held; ``sk.life``: one attribute load
        each (atomic), paired with advance(FINISHED) in post, re-read by ``flush``."""
        entry = sk.dst
        if entry is not None:
            if self._keeps(sk, entry, dst):
                return entry
            sk.dst = None
            entry.release()
        if sk.life & FINISHED or self.host.ip.is_local(dst) or is_multicast(dst) \
                or dst == LIMITED_BROADCAST:
            return None
        entry = self.host.dst_cache.lookup(dst, sk.bound_dev)
        sk.dst = entry
        return entry

    def _keeps(self, sk: TcpSock, entry: DstEntry, dst: bytes) -> bool:
        """__sk_dst_check's test: the pinned ``entry`` still serves ``dst`` (``sk.life``:
        one attribute load, atomic, paired with advance(FINISHED) in post)."""
        return entry.dst == dst and not sk.life & FINISHED \
            and self.host.dst_cache.current(entry)

    def _drop_route_xmit(self, sk: TcpSock) -> None:
        """sk_dst_reset: release the pinned route.  ``sk.xmit`` held."""
        entry, sk.dst = sk.dst, None
        if entry is not None:
            entry.release()

    def offload(self, dst: bytes) -> bool:
        """May segments to ``dst`` leave their checksum to the link (``offloads``)?"""
        entry = self.host.dst_cache.lookup(dst)
        if entry is None:
            return False
        try:
            return offloads(self.host, entry, dst, self.host.ip.is_local(dst))
        finally:
            entry.release()

    def segment(self, src: bytes, dst: bytes, seg: tcp.Repr, oif: int = 0,
                offload: bool = False, header: bytes | None = None, df: bool = True,
                tos: int = 0) -> None:
        """One segment to IP.  ``offload``: the connection's link does checksums (a clean
        in-memory link or loopback, as a NIC would): the field is left zero.  The header
        and the payload go to IP apart: the frame is made by one join (``output_gather``),
        not one copy of the payload per layer."""
        def build_header(source: bytes, dest: bytes) -> bytes:
            if header is not None:  # built already (a signed reply: ``reply``)
                return header
            return seg.build_header(src=source, dst=dest, checksum=not offload)

        # Path MTU discovery (RFC 1191/8201): never fragmented on the way; a narrower
        # link answers with an ICMP error and the connection resizes (mtu_reduced_locked).
        self.host.ip.output_gather(src, dst, tcp.PROTOCOL, build_header, seg.payload, oif=oif,
                                   dont_fragment=df, tos=tos | seg.ecn)

    def reply(self, seg: tcp.Repr, info: Delivery, keys: md5.Keys | None = None) -> None:
        """Send a segment built by the layer itself (RST, TIME_WAIT ACK, cookie SYN,ACK),
        signed when ``keys`` hold one for the peer (tcp_v4_send_ack, tcp_v4_send_reset)."""
        header: bytes | None = None
        if keys is not None:
            key = md5.lookup(keys, info.src)
            if key is not None and seg.timestamp is not None:
                # tcp_v4_send_ack's layout: the timestamps, then the signature
                header = tcp_md5.reply_header(seg, unmapped(info.dst), unmapped(info.src),
                                              key.key)
            else:
                seg = sign(seg, keys, info.dst, info.src)
        self.host.counters.inc("TcpOutSegs")
        if seg.flags & tcp.RST:
            self.host.counters.inc("TcpOutRsts")
        self.segment(info.dst, info.src, seg, header=header)

    def reply_reset(self, seg: tcp.Repr, info: Delivery,
                    keys: md5.Keys | None = None) -> None:
        reply = reset_for(seg)
        if reply is not None:
            self.reply(reply, info, keys)

    def no_socket(self, seg: tcp.Repr, info: Delivery) -> None:
        self.host.counters.inc("TcpInSegs")
        if seg.unknown_options and _has_md5(seg):
            # tcp_v4_send_reset: a signed segment for no socket gets a RST only when a
            # listener's key proves it genuine; rcunet keeps no such key apart from a
            # socket, so none
            return
        self.reply_reset(seg, info)


def sign(seg: tcp.Repr, keys: md5.Keys, src: bytes, dst: bytes) -> tcp.Repr:
    """``seg`` signed with the key ``keys`` hold for ``dst`` (tcp_md5_do_lookup per
    segment, as tcp_transmit_skb does), else as it is."""
    key = md5.lookup(keys, dst)
    if key is None:
        return seg
    return tcp_md5.sign(seg, unmapped(src), unmapped(dst), key.key)


def _has_md5(seg: tcp.Repr) -> bool:
    return any(kind == tcp_md5.MD5SIG for kind, _ in seg.unknown_options)
