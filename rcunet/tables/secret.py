"""Keyed hashes for the socket tables (reference §1.3, §2.1, §2.2, §3.1).

One ``HashSecret`` per Host (network namespace).  It plays the role of Linux's boot-time
``inet_ehash_secret`` + ``net_hash_mix(net)`` (bucket hashes) and ``net_secret`` (the
SipHash behind ``secure_ipv4_port_ephemeral``).  All values come from an injected RNG so
runs are reproducible.

Bucket hashes are on every lookup, so they must be cheap.  They hash a tuple that holds
the per-host seed and the packed address ``bytes``: CPython salts ``bytes`` hashing with
SipHash keyed per process and caches the result on the object, so hashing an address the
table has seen before costs one tuple hash.  The per-host seed makes two Hosts place the
same 4-tuple in different buckets (reference §8.2 item 1).

The port-offset hash is computed once per connect() and must be unpredictable to a peer;
it uses keyed BLAKE2b (64-bit digest), salted with the 10-second time bucket as Linux's
"tcp: resalt the secret every 10 seconds".
"""

from __future__ import annotations

import hashlib
import random

from mypy_extensions import mypyc_attr

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.wire.addr import ANY4, ANY6, V4_MAPPED_PREFIX

M32 = 0xFFFFFFFF
#: Linux re-salts the ephemeral-port secret every 10 seconds (``jiffies / (10 * HZ)``).
PORT_SECRET_PERIOD_NS = 10 * 1_000_000_000



def portaddr_key(addr: bytes) -> bytes:
    """The address as ``ipv{4,6}_portaddr_hash`` sees it: v4-mapped and the IPv6
    wildcard hash like their IPv4 forms, so 0.0.0.0, :: and ::ffff:0.0.0.0 share a
    bucket (reference §2.2, bhash2 "addr any" check)."""
    if len(addr) == 16:
        if addr == ANY6:
            return ANY4
        if addr[:12] == V4_MAPPED_PREFIX:
            return addr[12:]
    return addr


def bhash_slot(port: int, net_mix: int, mask: int) -> int:
    """``inet_bhashfn``: ``(port + net_hash_mix(net)) & (bhash_size - 1)``.  A function of
    plain ints, so a loop that read ``net_mix`` and ``mask`` once can call it per port."""
    return (port + net_mix) & mask


@mypyc_attr(allow_interpreted_subclasses=True)  # tests count the hash calls in a subclass
class HashSecret:
    """Per-host hash keys.

    Concurrency: the keys are immutable after ``__init__``; the methods are pure
    functions of their arguments and the keys, callable from any thread.  The one other
    field, ``_last_port``, remembers the last port offset computed (connects to one
    destination repeat its inputs for 10 s); it is replaced whole, never changed.
    """

    __slots__ = lockfree_read_slots("ehash_seed", "net_mix", "_port_key", "_last_port")

    def __init__(self, rng: random.Random) -> None:
        self.ehash_seed: int = rng.getrandbits(64)  # immutable
        self.net_mix: int = rng.getrandbits(32)  # immutable; net_hash_mix()
        self._port_key: bytes = rng.getrandbits(128).to_bytes(16, "little")  # immutable
        #: (epoch, dport, saddr, daddr, offset) of the last port_ephemeral()
        self._last_port: tuple[int, int, bytes, bytes, int] = (-1, -1, b"", b"", 0)

    # --- ehash (reference §1.3, post-March-2025 semantics) ------------------------------
    def ehash_port0(self, laddr: bytes, faddr: bytes, fport: int) -> int:
        """``inet_ehashfn(laddr, 0, faddr, fport)``: the 4-tuple hash with lport = 0."""
        return hash((self.ehash_seed, laddr, faddr, fport)) & M32

    def ehashfn(self, laddr: bytes, lport: int, faddr: bytes, fport: int) -> int:
        """Full 4-tuple hash: ``lport + ehash_port0(...)`` mod 2^32, so connect() can
        derive each candidate's hash with one addition (commit 9544d60a2605)."""
        return (self.ehash_port0(laddr, faddr, fport) + lport) & M32

    # --- bind / listen tables (reference §2.1, §2.2, §2.5) -------------------------------
    def bhash_index(self, port: int, mask: int) -> int:
        """``inet_bhashfn``: the bind-hash slot of ``port`` (``mask``: size - 1)."""
        return bhash_slot(port, self.net_mix, mask)

    def portaddr_hash(self, addr: bytes, port: int) -> int:
        """``ipv{4,6}_portaddr_hash(net, addr, port)``: keyed address hash xor port."""
        return (hash((self.net_mix, portaddr_key(addr))) ^ port) & M32

    # --- connect() port offset (reference §3.1) ----------------------------------------
    def port_ephemeral(self, saddr: bytes, daddr: bytes, dport: int, now: int) -> int:
        """64-bit keyed hash of (saddr, daddr, dport, now // 10 s), the equivalent of
        ``secure_ipv4_port_ephemeral``.  Low bits index the perturbation table, high 32
        bits offset the scan (different halves, as Linux since 2022)."""
        epoch = now // PORT_SECRET_PERIOD_NS
        # atomic: one attribute load of a tuple, pairs with the store below; a thread that
        # loses the race stores its own equal or newer tuple, never a torn one
        last = self._last_port
        if last[0] == epoch and last[1] == dport and last[2] == saddr and last[3] == daddr:
            return last[4]
        message = saddr + daddr + dport.to_bytes(2, "big") + epoch.to_bytes(8, "big", signed=True)
        digest = hashlib.blake2b(message, key=self._port_key, digest_size=8).digest()
        offset = int.from_bytes(digest, "little")
        self._last_port = (epoch, dport, saddr, daddr, offset)
        return offset
