"""TCP on a Host: the per-host tables (``TcpHashInfo``: ehash with TIME_WAIT entries,
bhash/bhash2, lhash2, connect-time port selection), the receive path, the listener's SYN
and accept queues, SYN cookies, timers, TIME_WAIT and teardown.  Sockets are
``rcunet.host.tcp.sock.TcpSock``; the engine is ``rcunet.core.tcp.Connection``.

One module per responsibility.  ``TcpLayer`` (``layer``) holds the tables, the sockets
and connect(), and one typed part per module, each given exactly the others it uses:

  demux      ``Demux``, the receive path (``tcp_v4_rcv``): parse, ehash lookup,
             ``bh_deliver``
  listener   ``Listeners``: SYN and accept queues, children, SYN cookies
  timewait   ``TimeWaits``: TIME_WAIT entries (their rules: ``rcunet.core.tcp.timewait``)
  transmit   ``Transmit``: the outbox through the socket's pinned route; the layer's own
             replies
  fastopen   ``FastOpen``: keys, the listeners' Fast Open queues, the client's cookies
  icmp       ``IcmpErrors``: path MTU, soft errors
  buffers    ``RxBuffers``: pooled receive buffers and their deferred frees (seed 001)
  teardown   ``Teardown``: the one teardown (tcp_done and tcp_time_wait), claimed by
             ``TcpSock.post``
  common     the global lock, units, address helpers

The socket (the user side, what ``rcunet.api.socket.Socket`` delegates to):

  sock          ``TcpSock``: socket lock, send/recv/connect/accept/close, waking
  sockopt       setsockopt/getsockopt and the engine options they make
  fastopen_opts Fast Open's socket options and its client side (sendto MSG_FASTOPEN)
  errq          the error queue: MSG_ZEROCOPY completions, transmit timestamps
  info          TCP_INFO (Linux's struct tcp_info)
  poll          the real fd whose poll state mirrors the socket
  life          the socket's life: its steps and their order, the teardown it asks
                for, the table state of each engine state

The socket is the only writer of its own fields (outbox, receive queue, timer,
teardown, table state, a listener's queues), and every call into a connection's engine
goes through ``TcpSock.engine``, which collects what it produced (segments, events,
counters, the next deadline) on the way out.  Segments are queued
on the socket's ``outbox`` under the socket lock and transmitted by ``flush`` after the
lock is dropped, so an inline link that runs the peer's receive path in this thread
never runs it under our lock.

With ``Tuning.accept_no_global_lock`` False, a FreeBSD-9.2-style global ``tcbinfo_lock``
is taken on accept, SYN processing and teardown (the "before" of seed 004): around the
accept queue, the listener's SYN and handshake-completing ACK, TIME_WAIT and unhashing,
and, as 9.2's ``tcp_input`` took ``INP_INFO_WLOCK``, around the input of every segment
that carries SYN, FIN or RST or reaches a connection not ESTABLISHED (``legacy_input_lock``).

Counters use nstat names (TcpActiveOpens, TcpExtListenOverflows, TcpExtTWRecycled, ...):
the engine's per-connection counters are moved to ``host.counters`` after each call.

For the seed-001 lab: ``TcpSock.lock_stats()`` (owner-section hold times, deepest backlog,
backlog drops), ``TcpLayer.lock_hold_ns``/``lock_holds`` (every socket of the host) and
``TcpLayer.deferred`` (buffers deferred to / drained by their allocating worker).

Fast paths a benchmark can use: on a clean in-memory link (``checksum_offload``) input
skips checksum verification and output leaves the checksum to the link (loopback and
on-link peers only), and ``inline_rx`` links run the peer's input in the sending thread.
"""

from rcunet.host.tcp.buffers import LARGE_SKB, SMALL_SKB
from rcunet.host.tcp.common import TCBINFO_LOCK
from rcunet.host.tcp.layer import TcpLayer
from rcunet.host.tcp.listener import COOKIE_WINDOW
from rcunet.host.tcp.timewait import TcpTimeWait

__all__ = ["COOKIE_WINDOW", "LARGE_SKB", "SMALL_SKB", "TCBINFO_LOCK", "TcpLayer",
           "TcpTimeWait"]
