"""What the socket tables store: the ``sock_common`` part of a socket.

Linux puts full sockets, TIME_WAIT mini-sockets and request sockets in one established
hash because all three start with ``struct sock_common``: identity (addresses, ports,
bound device), state, one refcount and the cached hash (reference §1.1).  ``TableEntry``
is that common part; the host's socket object subclasses ``SockEntry``.

Addresses are packed ``bytes`` (4 bytes for AF_INET, 16 for AF_INET6), ports ints in host
order.  ``key`` is the (laddr, lport, faddr, fport) tuple, compared in one operation.

Identity discipline (reference §1.6 "Field access discipline"): ``key``, ``lport`` and
``sk_hash`` change only under the lock of the table that publishes the entry, and are final
before the entry becomes visible.  An entry may be *recycled* (re-keyed and given a fresh
refcount) after it left every table - the SLAB_TYPESAFE_BY_RCU case - so a lockless reader
must pin (``ref.get()``) and then re-check ``key`` (see ``EstablishedTable.lookup``).
"""

from __future__ import annotations

import enum
import errno

from mypy_extensions import mypyc_attr

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.sync.refcount import RcuRef
from rcunet.wire.addr import ANY4, ANY6, is_v4mapped

AF_INET = 2
AF_INET6 = 10

#: What Linux stores in ``sk_rcv_saddr`` of an IPv6 socket bound to a non-mapped address.
LOOPBACK4_IPV6 = b"\x7f\0\0\x06"


class State(enum.IntEnum):
    """TCP states with Linux's numbering (``include/net/tcp_states.h``)."""

    ESTABLISHED = 1
    SYN_SENT = 2
    SYN_RECV = 3
    FIN_WAIT1 = 4
    FIN_WAIT2 = 5
    TIME_WAIT = 6
    CLOSE = 7
    CLOSE_WAIT = 8
    LAST_ACK = 9
    LISTEN = 10
    CLOSING = 11
    NEW_SYN_RECV = 12


# Compiled (setup.py), these are native classes: an interpreted subclass (UdpEntry while
# tables/udp_entry.py runs from source) needs mypyc's consent, at the price of Python-level
# dispatch for methods called through these two types.  No ``__weakref__``: mypyc gives it
# only to classes with a ``__dict__``.
@mypyc_attr(allow_interpreted_subclasses=True)
class TableEntry:
    """Identity, state, refcount and cached hash of anything the TCP tables hold.

    Concurrency:
      identity  ``key``/``lport``/``laddr``/``faddr``/``fport``/``sk_hash``: written by
                the owner before publication or under the publishing table's lock; read
                by lockless lookups, which pin and re-check (module docstring).
      state     one attribute store; readers tolerate a stale value and re-check under
                the bucket lock where it matters (connect's TIME_WAIT decision).
      ref       RcuRef: get() is one unconditional add, fails only on a dead entry.
      tb, tb2   bind buckets this entry owns; guarded by the bhash lock of ``lport``.
    """

    # Read by lockless lookups from every thread: ordinary attributes on free-threaded
    # builds (rcunet.core.freethreaded explains why).
    __slots__ = lockfree_read_slots(
        "family", "laddr", "lport", "faddr", "fport", "key", "bound_dev", "state", "ref",
        "sk_hash", "reuseaddr", "reuseport", "uid", "v6only", "incoming_cpu",
        "reuseport_cb", "tb", "tb2",
    )

    def __init__(
        self,
        family: int,
        laddr: bytes,
        lport: int = 0,
        faddr: bytes | None = None,
        fport: int = 0,
        *,
        state: State = State.CLOSE,
        bound_dev: int = 0,
        reuseaddr: bool = False,
        reuseport: bool = False,
        uid: int = 0,
        v6only: bool = False,
    ) -> None:
        check_address(family, laddr)
        if faddr is None:
            faddr = ANY4 if family == AF_INET else ANY6
        check_address(family, faddr)
        self.family = family
        self.bound_dev = bound_dev
        self.state = state
        self.ref = RcuRef(1)
        self.sk_hash = 0
        self.reuseaddr = reuseaddr
        self.reuseport = reuseport
        self.uid = uid
        self.v6only = v6only
        self.incoming_cpu = -1
        self.reuseport_cb: object | None = None  # reuseport group, listen/udp tables
        self.tb: object | None = None  # bind bucket (bhash), when bound
        self.tb2: object | None = None  # bind2 bucket (bhash2), when bound
        self.set_key(laddr, lport, faddr, fport)

    def set_key(self, laddr: bytes, lport: int, faddr: bytes, fport: int) -> None:
        """Set the identity.  Only while unpublished or under the publishing lock."""
        self.laddr = laddr
        self.lport = lport
        self.faddr = faddr
        self.fport = fport
        self.key = (laddr, lport, faddr, fport)

    def recycle(self, laddr: bytes, lport: int, faddr: bytes, fport: int) -> None:
        """Reuse this object as a new socket (SLAB_TYPESAFE_BY_RCU): new identity, fresh
        refcount.  Only for an entry that left every table and whose ref is dead."""
        if not self.ref.is_dead():
            raise OSError(errno.EBUSY, "recycling an entry that is still referenced")
        self.set_key(laddr, lport, faddr, fport)
        self.sk_hash = 0
        self.tb = self.tb2 = None
        self.ref = RcuRef(1)

    # --- the addresses as inet_rcv_saddr_equal() sees them ---------------------------
    @property
    def rcv_saddr4(self) -> bytes:
        """``sk_rcv_saddr``: the IPv4 view of the bound address (reference §2.2)."""
        if self.family == AF_INET:
            return self.laddr
        if is_v4mapped(self.laddr):
            return self.laddr[12:]
        return ANY4 if self.laddr == ANY6 else LOOPBACK4_IPV6

    def __repr__(self) -> str:
        name = type(self).__name__
        state = State(self.state).name if self.state in State._value2member_map_ else self.state
        return f"<{name} {self.key!r} {state} ref={self.ref.read()}>"


@mypyc_attr(allow_interpreted_subclasses=True)
class SockEntry(TableEntry):
    """A full socket's table-relevant fields beyond ``sock_common``.

    ``local_port_range`` is the per-socket IP_LOCAL_PORT_RANGE (None: use the sysctl);
    ``bind_port_locked``/``bind_addr_locked`` are Linux's SOCK_BINDPORT_LOCK /
    SOCK_BINDADDR_LOCK userlocks.  ``write_seq``/``ts_recent*`` are set by connect() when it
    reuses a TIME_WAIT 4-tuple.  Owned by the socket's user (socket lock held).
    """

    __slots__ = lockfree_read_slots(
        "local_port_range", "bind_port_locked", "bind_addr_locked", "write_seq",
        "ts_recent", "ts_recent_stamp", "repair", base=TableEntry,
    )

    def __init__(self, family: int, laddr: bytes, lport: int = 0,
                 faddr: bytes | None = None, fport: int = 0, *,
                 state: State = State.CLOSE, bound_dev: int = 0, reuseaddr: bool = False,
                 reuseport: bool = False, uid: int = 0, v6only: bool = False) -> None:
        super().__init__(family, laddr, lport, faddr, fport, state=state, bound_dev=bound_dev,
                         reuseaddr=reuseaddr, reuseport=reuseport, uid=uid, v6only=v6only)
        self.local_port_range: tuple[int, int] | None = None
        self.bind_port_locked = False
        self.bind_addr_locked = False
        self.write_seq = 0
        self.ts_recent = 0
        self.ts_recent_stamp = 0
        self.repair = False


class TimeWaitEntry(TableEntry):
    """``inet_timewait_sock``: what remains of a closed connection (reference §3.4).

    ``ts_recent_stamp`` is 0 when the peer never sent timestamps (such a tw is never
    reused by connect()); ``entered_at`` is the ``now`` of the TIME_WAIT transition.
    Immutable after publication except ``ref``.
    """

    __slots__ = lockfree_read_slots("ts_recent", "ts_recent_stamp", "snd_nxt", "entered_at",
                                    "expires_at", base=TableEntry)

    def __init__(self, sk: TableEntry, *, now: int, expires_at: int, snd_nxt: int = 0,
                 ts_recent: int = 0, ts_recent_stamp: int = 0) -> None:
        super().__init__(
            sk.family, sk.laddr, sk.lport, sk.faddr, sk.fport, state=State.TIME_WAIT,
            bound_dev=sk.bound_dev, reuseaddr=sk.reuseaddr, reuseport=sk.reuseport,
            uid=sk.uid, v6only=sk.v6only,
        )
        self.sk_hash = sk.sk_hash
        self.snd_nxt = snd_nxt
        self.ts_recent = ts_recent
        self.ts_recent_stamp = ts_recent_stamp
        self.entered_at = now
        self.expires_at = expires_at


class RequestEntry(TableEntry):
    """A request socket (TCP_NEW_SYN_RECV) living in the established hash."""

    __slots__ = lockfree_read_slots("listener", base=TableEntry)

    def __init__(self, family: int, laddr: bytes, lport: int, faddr: bytes, fport: int,
                 listener: TableEntry | None = None, *, bound_dev: int = 0,
                 reuseaddr: bool = False, reuseport: bool = False, uid: int = 0,
                 v6only: bool = False) -> None:
        super().__init__(family, laddr, lport, faddr, fport, state=State.NEW_SYN_RECV,
                         bound_dev=bound_dev, reuseaddr=reuseaddr, reuseport=reuseport,
                         uid=uid, v6only=v6only)
        self.listener = listener


# ``object``, not the types they check: compiled, a wrong type would be refused with a
# TypeError at the call instead of the errno below.
def check_address(family: int, addr: object) -> None:
    """EINVAL / EAFNOSUPPORT for an address that cannot belong to ``family``."""
    if family == AF_INET:
        if not isinstance(addr, bytes) or len(addr) != 4:
            raise OSError(errno.EINVAL, f"IPv4 address must be 4 packed bytes, got {addr!r}")
    elif family == AF_INET6:
        if not isinstance(addr, bytes) or len(addr) != 16:
            raise OSError(errno.EINVAL, f"IPv6 address must be 16 packed bytes, got {addr!r}")
    else:
        raise OSError(errno.EAFNOSUPPORT, f"address family {family} not supported")


def check_port(port: object) -> None:
    if not isinstance(port, int) or not 0 <= port <= 0xFFFF:
        raise OSError(errno.EINVAL, f"port must be an int in 0..65535, got {port!r}")


# --- inet_rcv_saddr_equal (net/ipv4/inet_connection_sock.c) ------------------------------
def _ipv4_rcv_saddr_equal(a1: bytes, a2: bytes, sk2_ipv6only: bool,
                          match_sk1_wildcard: bool, match_sk2_wildcard: bool) -> bool:
    if sk2_ipv6only:
        return False
    if a1 == a2:
        return True
    return (match_sk1_wildcard and a1 == ANY4) or (match_sk2_wildcard and a2 == ANY4)


def _ipv6_rcv_saddr_equal(v6_1: bytes, v6_2: bytes | None, a1: bytes, a2: bytes,
                          sk1_ipv6only: bool, sk2_ipv6only: bool,
                          match_sk1_wildcard: bool, match_sk2_wildcard: bool) -> bool:
    mapped1 = is_v4mapped(v6_1)
    mapped2 = v6_2 is None or is_v4mapped(v6_2)  # an IPv4 sk2 counts as mapped
    if mapped1 and mapped2:
        return _ipv4_rcv_saddr_equal(a1, a2, sk2_ipv6only, match_sk1_wildcard,
                                     match_sk2_wildcard)
    any1 = v6_1 == ANY6
    any2 = v6_2 == ANY6
    if any1 and any2:
        return True
    if any2 and match_sk2_wildcard and not (sk2_ipv6only and mapped1):
        return True
    if any1 and match_sk1_wildcard and not (sk1_ipv6only and mapped2):
        return True
    return v6_2 is not None and v6_1 == v6_2


def rcv_saddr_equal(sk: TableEntry, sk2: TableEntry, match_wildcard: bool) -> bool:
    """Do the two bound addresses overlap?  ``inet_rcv_saddr_equal`` with Linux's IPv4 /
    IPv6 / v4-mapped / v6only rules; a wildcard matches everything of its family when
    ``match_wildcard`` (and an IPv6 wildcard also IPv4, unless v6only)."""
    if sk.family == AF_INET6:
        v6_2 = sk2.laddr if sk2.family == AF_INET6 else None
        return _ipv6_rcv_saddr_equal(sk.laddr, v6_2, sk.rcv_saddr4, sk2.rcv_saddr4,
                                     sk.v6only, sk2.v6only, match_wildcard, match_wildcard)
    return _ipv4_rcv_saddr_equal(sk.laddr, sk2.rcv_saddr4, sk2.family == AF_INET6 and sk2.v6only,
                                 match_wildcard, match_wildcard)


def fast_saddr_match(fast_family: int, fast_addr: bytes, fast_v6only: bool,
                     sk: TableEntry) -> bool:
    """``sk_reuseport_match``'s address test against a tb's cached ``fast_*`` fields
    (match_sk1_wildcard=True, match_sk2_wildcard=False)."""
    if fast_family == AF_INET6:
        fast4 = fast_addr[12:] if is_v4mapped(fast_addr) else (
            ANY4 if fast_addr == ANY6 else LOOPBACK4_IPV6)
        v6_2 = sk.laddr if sk.family == AF_INET6 else None
        return _ipv6_rcv_saddr_equal(fast_addr, v6_2, fast4, sk.rcv_saddr4,
                                     fast_v6only, sk.v6only, True, False)
    return _ipv4_rcv_saddr_equal(fast_addr, sk.rcv_saddr4, sk.family == AF_INET6 and sk.v6only,
                                 True, False)
