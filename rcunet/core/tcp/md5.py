"""TCP MD5 signature keys (RFC 2385; Linux net/ipv4/tcp_ipv4.c, tcp_ipv6.c): what
TCP_MD5SIG and TCP_MD5SIG_EXT install, the lookup by peer address, and the inbound check
of tcp_inbound_hash.  Pure values and functions: the host's socket holds the keys
(``rcunet.host.tcp.md5``) and calls these.
"""

from __future__ import annotations

import errno
import hmac
import struct
from typing import NamedTuple

from rcunet.wire import tcp
from rcunet.wire import tcp_md5 as md5
from rcunet.wire.addr import is_v4mapped, unmapped
from rcunet.wire.errors import WireError

TCP_MD5SIG, TCP_MD5SIG_EXT = 14, 32
#: Linux's address families (struct sockaddr's first field).
AF_INET, AF_INET6 = 2, 10
#: tcpm_flags bits (include/uapi/linux/tcp.h).
FLAG_PREFIX, FLAG_IFINDEX = 0x1, 0x2
#: struct tcp_md5sig: sockaddr_storage (128), flags, prefixlen, keylen, ifindex, key[80].
_CMD = struct.Struct("=128sBBHi80s")
_FAMILY = struct.Struct("=H")


def _error(code: int, detail: str) -> OSError:
    """OSError(code) as the engine raises it (the socket layer gives it strerror's
    text); ``detail`` says which check failed, for whoever reads the source."""
    del detail
    return OSError(code, errno.errorcode[code])


class Md5Key(NamedTuple):
    """One key: the peer address (4 or 16 bytes) and prefix it covers, the
    TCP_MD5SIG_FLAG_IFINDEX bit it was added with, and the key bytes."""

    addr: bytes
    prefixlen: int
    flags: int
    key: bytes

    def matches(self, peer: bytes) -> bool:
        """Is ``peer`` (same family) within this key's prefix?"""
        if len(peer) != len(self.addr):
            return False
        bits = self.prefixlen
        whole, rest = divmod(bits, 8)
        if peer[:whole] != self.addr[:whole]:
            return False
        if rest:
            mask = (0xFF << (8 - rest)) & 0xFF
            return peer[whole] & mask == self.addr[whole] & mask
        return True


Keys = tuple[Md5Key, ...]


def lookup(keys: Keys | None, peer: bytes) -> Md5Key | None:
    """tcp_md5_do_lookup: the key for ``peer`` with the longest prefix (the newest of
    equals: better_md5_match keeps the first found, and keys are added at the head)."""
    if keys is None:
        return None
    peer = unmapped(peer)
    best: Md5Key | None = None
    for key in keys:
        if key.matches(peer) and (best is None or best.prefixlen < key.prefixlen):
            best = key
    return best


def apply_setsockopt(keys: Keys | None, family: int, optname: int, value: object
                     ) -> Keys | None:
    """The socket's keys after TCP_MD5SIG / TCP_MD5SIG_EXT with ``value`` (struct
    tcp_md5sig's bytes), or OSError with Linux's errno (tcp_v4_parse_md5_keys,
    tcp_v6_parse_md5_keys): EINVAL for a short struct, another address family, a prefix
    too long, an ifindex that is not an L3 master device (rcunet has none) or a key
    longer than 80 bytes; ENOENT for deleting (keylen 0) a key that is not there."""
    if not isinstance(value, bytes | bytearray | memoryview) or len(value) < _CMD.size:
        raise _error(errno.EINVAL, "TCP_MD5SIG takes struct tcp_md5sig")
    storage, flags, prefixlen, keylen, ifindex, key = _CMD.unpack_from(value)
    addr_family = _FAMILY.unpack_from(storage)[0]
    ext = optname == TCP_MD5SIG_EXT
    if family == AF_INET:
        if addr_family != AF_INET:
            raise _error(errno.EINVAL, "TCP_MD5SIG address family")
        addr = bytes(storage[4:8])
        full = 32
    else:
        if addr_family != AF_INET6:
            raise _error(errno.EINVAL, "TCP_MD5SIG address family")
        addr = bytes(storage[8:24])
        full = 32 if is_v4mapped(addr) else 128
        addr = unmapped(addr)
    if ext and flags & FLAG_PREFIX:
        if prefixlen > full:
            raise _error(errno.EINVAL, f"TCP_MD5SIG prefix /{prefixlen}")
    else:
        prefixlen = full
    if ext and ifindex and flags & FLAG_IFINDEX:
        raise _error(errno.EINVAL, "TCP_MD5SIG ifindex: not an L3 master device")
    flags &= FLAG_IFINDEX
    current = keys or ()
    same = [i for i, k in enumerate(current)
            if k.addr == addr and k.prefixlen == prefixlen and k.flags == flags]
    if keylen == 0:  # tcp_md5_do_del
        if not same:
            raise _error(errno.ENOENT, "no such TCP_MD5SIG key")
        left = current[:same[0]] + current[same[0] + 1:]
        return left or None
    if keylen > md5.MAX_KEY_LEN:
        raise _error(errno.EINVAL, f"TCP_MD5SIG key of {keylen} bytes (max 80)")
    entry = Md5Key(addr, prefixlen, flags, bytes(key[:keylen]))
    if same:  # an existing entry takes the new key in place
        i = same[0]
        return current[:i] + (entry,) + current[i + 1:]
    return (entry, *current)  # hlist_add_head_rcu


def child_keys(keys: Keys | None, peer: bytes) -> Keys | None:
    """The key a listener's child copies (tcp_v4_syn_recv_sock -> tcp_md5_key_copy):
    the listener's key for the peer, for the peer's address alone."""
    key = lookup(keys, peer)
    if key is None:
        return None
    exact = unmapped(peer)
    return (Md5Key(exact, len(exact) * 8, key.flags, key.key),)


class Verdict(NamedTuple):
    """What tcp_inbound_hash decided: ``drop``, and the counter to bump (Linux's nstat
    name; rcunet's own RcunetTcpMD5BadOption for a malformed option, which Linux counts
    only as the drop reason SKB_DROP_REASON_TCP_AUTH_HDR)."""

    drop: bool
    counter: str = ""


ACCEPT = Verdict(False)


def inbound(keys: Keys | None, seg: tcp.Repr, raw: memoryview, src: bytes, dst: bytes
            ) -> Verdict:
    """tcp_inbound_hash / tcp_inbound_md5_hash for a segment (its bytes ``raw``) from
    ``src`` to a socket with ``keys``:

    * no option, no key: accepted;
    * no option, a key for the peer: TCPMD5NotFound, dropped;
    * an option, no key: TCPMD5Unexpected, dropped;
    * an option whose digest is wrong: TCPMD5Failure, dropped;
    * an MD5 option of another length, or two (tcp_do_parse_auth_options): dropped
      (RcunetTcpMD5BadOption).
    """
    try:
        digest = md5.signature(seg.unknown_options) if seg.unknown_options else None
    except WireError:
        return Verdict(True, "RcunetTcpMD5BadOption")
    key = lookup(keys, src)
    if digest is None:
        return Verdict(True, "TcpExtTCPMD5NotFound") if key is not None else ACCEPT
    if key is None:
        return Verdict(True, "TcpExtTCPMD5Unexpected")
    expected = md5.digest_raw(raw, unmapped(src), unmapped(dst), key.key)
    if not hmac.compare_digest(expected, digest):
        return Verdict(True, "TcpExtTCPMD5Failure")
    return ACCEPT


__all__ = ["ACCEPT", "FLAG_IFINDEX", "FLAG_PREFIX", "Keys", "Md5Key", "TCP_MD5SIG",
           "TCP_MD5SIG_EXT", "Verdict", "apply_setsockopt", "child_keys", "inbound",
           "lookup"]
