"""TCP Fast Open on a Host's listeners (RFC 7413; Linux net/ipv4/tcp_fastopen.c): the
listener's Fast Open queue and key, and the decision a SYN gets
(``rcunet.core.tcp.fastopen.server_decision``, Linux tcp_try_fastopen).  The socket
options are ``rcunet.host.tcp_fastopen``.

A SYN that opens fast makes a child that takes the SYN's data and goes straight onto the
accept queue in SYN_RECV (Linux tcp_fastopen_create_child: inet_csk_reqsk_queue_add), so
accept() returns it with the data readable before the handshake completes.  It counts in
the listener's Fast Open queue (``fastopen_qlen``, Linux fastopenq.qlen) until its
handshake completes or it dies (reqsk_fastopen_remove).
"""

from __future__ import annotations

from typing import Any

from rcunet.core.tcp import fastopen
from rcunet.host.ip import Delivery
from rcunet.host.tcp_fastopen import host_key
from rcunet.host.tcp_sock import TcpSock
from rcunet.wire import tcp


class FastOpenMixin:
    """``TcpLayer``'s Fast Open: keys, the listener's queue, the SYN's decision."""

    host: Any
    secret: bytes

    def fastopen_keys(self, lsk: TcpSock) -> tuple[bytes, ...]:
        """tcp_fastopen_get_ctx: the listener's own keys (TCP_FASTOPEN_KEY), else the
        sysctl's, else the Host's own.  Atomic: attribute loads of immutable tuples."""
        keys = lsk.fastopen_keys
        if keys:
            return keys
        keys = self.host.tuning.tcp_fastopen_key
        return keys if keys else (host_key(self.secret),)

    def fastopen_decision(self, lsk: TcpSock, seg: tcp.Repr,
                          info: Delivery) -> fastopen.ServerDecision:
        """tcp_try_fastopen for a SYN this listener takes into its SYN queue.  Counts
        what Linux counts.  A child it lets open fast is charged to the Fast Open queue
        by ``fastopen_charge``."""
        offered = fastopen.syn_cookie(seg.unknown_options) if seg.unknown_options else None
        syn_data = bool(seg.payload)
        if offered is None and not syn_data:
            return _NO_FASTOPEN  # the common SYN: nothing to decide
        decision = fastopen.server_decision(
            sysctl=self.host.tuning.tcp_fastopen, no_cookie=lsk.fastopen_no_cookie,
            queue_ok=self._fastopen_queue_check(lsk), syn_data=syn_data, offered=offered,
            keys=self.fastopen_keys(lsk), saddr=info.src, daddr=info.dst)
        for name in decision.counters:
            self.host.counters.inc(name)
        return decision

    def _fastopen_queue_check(self, lsk: TcpSock) -> bool:
        """tcp_fastopen_queue_check: Fast Open is on for this listener and its queue has
        room (TcpExtTCPFastOpenListenOverflow when not)."""
        if not lsk.fastopen_max_qlen:
            return False
        with lsk.rskq_lock:
            full = lsk.fastopen_qlen >= lsk.fastopen_max_qlen
        if full:
            self.host.counters.inc("TcpExtTCPFastOpenListenOverflow")
        return not full

    def fastopen_charge(self, lsk: TcpSock, child: TcpSock) -> None:
        """The child counts in the listener's Fast Open queue (rskq_lock held)."""
        lsk.fastopen_qlen += 1
        child.tfo_listener = lsk

    def fastopen_release(self, child: TcpSock) -> None:
        """reqsk_fastopen_remove: the child's handshake completed or it died."""
        lsk, child.tfo_listener = child.tfo_listener, None
        if lsk is None:
            return
        with lsk.rskq_lock:
            if lsk.fastopen_qlen > 0:
                lsk.fastopen_qlen -= 1


_NO_FASTOPEN = fastopen.ServerDecision(False, None, ())
