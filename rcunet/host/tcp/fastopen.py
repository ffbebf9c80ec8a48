"""TCP Fast Open on a Host's listeners (RFC 7413; Linux net/ipv4/tcp_fastopen.c): the
listener's Fast Open queue and key, and the decision a SYN gets
(``rcunet.core.tcp.fastopen.server_decision``, Linux tcp_try_fastopen).  The socket
options are ``rcunet.host.tcp.fastopen_opts``.

A SYN that opens fast makes a child that takes the SYN's data and goes straight onto the
accept queue in SYN_RECV (Linux tcp_fastopen_create_child: inet_csk_reqsk_queue_add), so
accept() returns it with the data readable before the handshake completes.  It counts in
the listener's Fast Open queue (``fastopen_qlen``, Linux fastopenq.qlen) until its
handshake completes or it dies (reqsk_fastopen_remove).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rcunet.core.tcp import Connection, fastopen
from rcunet.host.ip import Delivery
from rcunet.host.sockerr import wire
from rcunet.host.tcp.fastopen_opts import host_key
from rcunet.host.tcp.sock import TcpSock
from rcunet.wire import tcp

if TYPE_CHECKING:
    from rcunet.host.host import Host


class FastOpen:
    """The Host's Fast Open: keys, the listener's queue, the SYN's decision, and the
    client's cookie cache.

    Concurrency: ``cache`` entries are immutable and replaced whole (one dict store);
    a listener's ``fastopen_qlen`` is guarded by its rskq_lock."""

    def __init__(self, host: Host, secret: bytes) -> None:
        self.host = host
        self.secret = secret
        #: The client's cookie cache (Linux tcp_metrics' Fast Open part), by server address.
        self.cache: dict[bytes, fastopen.CachedCookie] = {}

    def keys(self, lsk: TcpSock) -> tuple[bytes, ...]:
        """tcp_fastopen_get_ctx: the listener's own keys (TCP_FASTOPEN_KEY), else the
        sysctl's, else the Host's own.  Atomic: attribute loads of immutable tuples."""
        keys = lsk.fastopen_keys
        if keys:
            return keys
        keys = self.host.tuning.tcp_fastopen_key
        return keys if keys else (host_key(self.secret),)

    def decision(self, lsk: TcpSock, seg: tcp.Repr,
                          info: Delivery) -> fastopen.ServerDecision:
        """tcp_try_fastopen for a SYN this listener takes into its SYN queue.  Counts
        what Linux counts.  A child it lets open fast is charged to the Fast Open queue
        by ``TcpSock.queue_child``."""
        offered = fastopen.syn_cookie(seg.unknown_options) if seg.unknown_options else None
        syn_data = bool(seg.payload)
        if offered is None and not syn_data:
            return _NO_FASTOPEN  # the common SYN: nothing to decide
        decision = fastopen.server_decision(
            sysctl=self.host.tuning.tcp_fastopen, no_cookie=lsk.fastopen_no_cookie,
            queue_ok=self._queue_check(lsk), syn_data=syn_data, offered=offered,
            keys=self.keys(lsk), saddr=info.src, daddr=info.dst)
        for name in decision.counters:
            self.host.counters.inc(name)
        return decision

    def _queue_check(self, lsk: TcpSock) -> bool:
        """tcp_fastopen_queue_check: Fast Open is on for this listener and its queue has
        room (TcpExtTCPFastOpenListenOverflow when not)."""
        if not lsk.fastopen_max_qlen:
            return False
        with lsk.rskq_lock:
            full = lsk.fastopen_qlen >= lsk.fastopen_max_qlen
        if full:
            self.host.counters.inc("TcpExtTCPFastOpenListenOverflow")
        return not full

    def release(self, child: TcpSock) -> None:
        """reqsk_fastopen_remove: the child's handshake completed or it died."""
        child.leave_fastopen_queue()

    # -- the client side (Linux tcp_send_syn_data, tcp_fastopen_cookie_check,
    # tcp_fastopen_cache_get/set) ------------------------------------------------------
    def syn(self, sk: TcpSock, daddr: bytes, path_mss: int,
                     data: bytes) -> tuple[bytes, tuple[int, bytes] | None]:
        """tcp_send_syn_data: the data a SYN to ``daddr`` carries and its Fast Open
        option.  Without a cached cookie (and cookies required) the SYN carries no data
        and asks for a cookie (the fallback's 'regular SYN with Fast Open cookie request
        option')."""
        no_cookie = bool(self.host.tuning.tcp_fastopen & fastopen.TFO_CLIENT_NO_COOKIE
                         or sk.fastopen_no_cookie)
        # atomic: dict subscript (the cache's entries are immutable, replaced whole)
        try:
            entry: fastopen.CachedCookie | None = self.cache[daddr]
        except KeyError:
            entry = None
        ok, option, cached_mss = fastopen.client_cookie(entry, no_cookie=no_cookie)
        if not ok:
            assert option is not None
            return b"", fastopen.cookie_option(b"", option.exp)
        if sk.user_mss:
            path_mss = min(path_mss, sk.user_mss)
        n = fastopen.syn_data_space(path_mss, cached_mss, len(data))
        return data[:n], (fastopen.cookie_option(option.value, option.exp)
                          if option is not None else None)

    def may_defer(self, sk: TcpSock, daddr: bytes) -> bool:
        """tcp_fastopen_defer_connect's test: a cookie is cached for ``daddr`` (or none is
        needed), so connect() may leave the SYN to the first write, which it carries."""
        no_cookie = bool(self.host.tuning.tcp_fastopen & fastopen.TFO_CLIENT_NO_COOKIE
                         or sk.fastopen_no_cookie)
        try:
            entry: fastopen.CachedCookie | None = self.cache[daddr]  # atomic
        except KeyError:
            entry = None
        return fastopen.client_cookie(entry, no_cookie=no_cookie)[0]

    def synack_seen(self, sk: TcpSock, conn: Connection) -> None:
        """tcp_fastopen_cache_set after the SYN-ACK of an active Fast Open: remember the
        server's MSS and cookie for its address (socket lock held; one dict store of an
        immutable entry, so a racing reader sees the old or the new one)."""
        attempt = conn.fastopen_active
        if attempt is None or not attempt.answered:
            return
        daddr = wire(sk.faddr)
        try:
            old: fastopen.CachedCookie | None = self.cache[daddr]  # atomic
        except KeyError:
            old = None
        self.cache[daddr] = fastopen.cache_update(old, attempt)


_NO_FASTOPEN = fastopen.ServerDecision(False, None, ())
