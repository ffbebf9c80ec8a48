"""A TCP socket's MD5 signature keys (RFC 2385): setsockopt installs them
(``rcunet.core.tcp.md5`` parses and looks up), the receive path checks each segment
against them before the socket sees it (``drops``), the transmitter signs with them.

A socket's keys are one immutable tuple (``TcpSock.md5_keys``, newest first, None while
it has none) replaced whole by setsockopt under the socket lock: the receive path and
the transmitter read it with no lock (one attribute load), as Linux reads md5sig_info
under RCU.  A connection without keys pays one None check per segment sent; on input,
one None check and the segment's unknown options (empty on the usual layouts).
"""

from __future__ import annotations

from rcunet.core.tcp.md5 import (
    TCP_MD5SIG,
    TCP_MD5SIG_EXT,
    Keys,
    apply_setsockopt,
    child_keys,
    inbound,
    lookup,
)
from rcunet.host.counters import Counters
from rcunet.wire import tcp


def drops(counters: Counters, keys: Keys | None, seg: tcp.Repr, raw: memoryview,
          src: bytes, dst: bytes) -> bool:
    """tcp_inbound_hash for a segment about to reach a socket with ``keys``
    (``inbound``): True when it is dropped, counted under its name."""
    verdict = inbound(keys, seg, raw, src, dst)
    if not verdict.drop:
        return False
    counters.inc(verdict.counter)
    return True


__all__ = ["TCP_MD5SIG", "TCP_MD5SIG_EXT", "Keys", "apply_setsockopt", "child_keys", "drops",
           "lookup"]
