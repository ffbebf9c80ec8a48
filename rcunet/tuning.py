"""Per-Host tuning: Linux's sysctls under their Linux names, and the seeds as switches.

Every seed's "before" is one switch here so legacy and modern run side by side in one
benchmark.  ``Tuning()`` (or ``Tuning.modern()``) is the scalable design; ``Tuning.legacy()``
turns every seed switch back.  Fields can also be set one at a time with
``dataclasses.replace``.  A Tuning is immutable: a Host publishes a new one with a single
store, so readers need no lock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from rcunet.core.tcp.congestion.cubic_params import DEFAULT_PARAMS, CubicParams

#: The switches that undo one seed each, with their modern value.  ``legacy()`` flips them.
SEED_SWITCHES: dict[str, tuple[str, ...]] = {
    "seed000": ("connect_rcu_precheck", "connect_hash_port0"),
    "seed001": ("tcp_defer_free",),
    "seed002": ("dst_rcuref",),
    "seed003": ("udp_mcast_hash2", "udp_mcast_deliver_unlocked"),
    "seed004": ("accept_no_global_lock",),
}


@dataclass(frozen=True, slots=True)
class Tuning:
    # --- seed 000: connect() port search (reference §3) -------------------------------
    #: Check each candidate port's bhash chain and 4-tuple without the bucket lock first.
    connect_rcu_precheck: bool = True
    #: Hash (laddr, 0, faddr, fport) once per connect and add lport (Series B of §3.6);
    #: legacy rehashes the full 4-tuple for every candidate.
    connect_hash_port0: bool = True
    # --- seed 001: TCP receive path (reference §5) --------------------------------------
    #: recv() frees consumed buffers after the socket lock is released, returning them to
    #: the allocating worker; legacy frees them under the lock.
    tcp_defer_free: bool = True
    # --- seed 002: route cache refcount (reference §4) -----------------------------------
    #: dst entries pinned with rcuref; legacy uses an inc-not-zero (compare-and-swap) count.
    dst_rcuref: bool = True
    # --- seed 003: UDP multicast delivery (reference §6.5) -------------------------------
    #: Use the (address, port) secondary hash for long chains; legacy walks the port chain.
    udp_mcast_hash2: bool = True
    #: Collect receivers under the bucket lock, deliver outside it; legacy delivers under it.
    udp_mcast_deliver_unlocked: bool = True
    # --- seed 004: FreeBSD INP_INFO (reference §7.2) -------------------------------------
    #: accept() and SYN processing take no global lock; legacy takes a FreeBSD-9.2-style
    #: global connection-table lock on accept, SYN processing and teardown.
    accept_no_global_lock: bool = True

    # --- sysctls (Linux names and defaults) ----------------------------------------------
    ip_local_port_range: tuple[int, int] = (32768, 60999)
    ip_local_reserved_ports: frozenset[int] = field(default_factory=frozenset)
    ip_forward: bool = False
    netdev_max_backlog: int = 1000  # frames queued per receive queue before drops
    ip_default_ttl: int = 64
    ipfrag_high_thresh: int = 4 * 1024 * 1024
    ipfrag_time: float = 30.0
    tcp_tw_reuse: int = 2
    tcp_tw_reuse_delay: int = 1000  # ms
    tcp_timestamps: bool = True
    tcp_sack: bool = True
    tcp_window_scaling: bool = True
    #: net.ipv4.tcp_ecn as Linux 7.0 reads it (rcunet.core.tcp.accecn.TcpEcn): 0 off,
    #: 1 RFC 3168 both ways, 2 answer RFC 3168 but never ask (Linux's default), 3 AccECN
    #: both ways, 4 answer AccECN and ask RFC 3168, 5 answer AccECN and never ask.
    tcp_ecn: int = 2
    #: net.ipv4.tcp_ecn_fallback: drop ECN from a retransmitted SYN (RFC 3168 §6.1.1.1)
    #: and distrust impossible AccECN feedback.
    tcp_ecn_fallback: bool = True
    #: net.ipv4.tcp_ecn_option (rcunet.core.tcp.accecn.EcnOption): when an AccECN
    #: connection sends the AccECN option: 0 never, 1 on demand, 2 (Linux's default) on
    #: every segment with room, 3 even after the path dropped it.
    tcp_ecn_option: int = 2
    #: net.ipv4.tcp_ecn_option_beacon: the option goes out at least this many times per
    #: smoothed RTT with tcp_ecn_option=1.
    tcp_ecn_option_beacon: int = 3
    tcp_syncookies: int = 1
    tcp_max_syn_backlog: int = 4096
    #: TCP Fast Open (RFC 7413) bits, Linux's net.ipv4.tcp_fastopen: 0x1 client, 0x2
    #: server, 0x4 client without cookie, 0x200 server without cookie, 0x400 every
    #: listener without TCP_FASTOPEN (rcunet.core.tcp.fastopen).  Linux's default: 0x1.
    tcp_fastopen: int = 1
    #: net.ipv4.tcp_fastopen_key: the primary key (and an optional backup), 16 bytes
    #: each; empty: the Host's own random key (Linux draws one on first use).
    tcp_fastopen_key: tuple[bytes, ...] = ()
    somaxconn: int = 4096
    tcp_max_tw_buckets: int = 262144
    tcp_fin_timeout: float = 60.0
    tcp_syn_retries: int = 6
    tcp_synack_retries: int = 5
    tcp_retries2: int = 15
    #: The longest retransmission timeout, ms (Linux net.ipv4.tcp_rto_max_ms, 1000 to
    #: 120000): new sockets start with it; TCP_RTO_MAX_MS overrides it per socket.
    tcp_rto_max_ms: int = 120000
    #: The floor of the retransmission timeout's variance term, us (Linux
    #: net.ipv4.tcp_rto_min_us, kept in whole jiffies); TCP_RTO_MIN_US overrides it.
    tcp_rto_min_us: int = 200000
    tcp_keepalive_time: float = 7200.0
    tcp_keepalive_intvl: float = 75.0
    tcp_keepalive_probes: int = 9
    #: Unsent bytes above which a socket stops being writable (tcp_stream_memory_free);
    #: TCP_NOTSENT_LOWAT overrides it per socket.  Linux's default: UINT_MAX (off).
    tcp_notsent_lowat: int = 0xFFFFFFFF
    tcp_rmem: tuple[int, int, int] = (4096, 131072, 6291456)
    tcp_wmem: tuple[int, int, int] = (4096, 16384, 4194304)
    #: net.ipv4.tcp_shrink_window: with window scaling, let the offered window shrink
    #: when the receive buffer fills instead of keeping its right edge (Linux 6.5+).
    tcp_shrink_window: bool = False
    #: net.ipv4.tcp_rcvbuf_low_rtt (µs): receivers with a smaller RTT grow their buffer
    #: in proportion to it rather than for a doubling rate.
    tcp_rcvbuf_low_rtt: int = 1000
    #: Receive-buffer autotuning up to tcp_rmem[2] (Linux tcp_moderate_rcvbuf); sockets
    #: that set SO_RCVBUF keep their size either way.
    tcp_moderate_rcvbuf: bool = True
    tcp_congestion_control: str = "cubic"
    #: The tcp_cubic module's parameters (/sys/module/tcp_cubic/parameters), which a
    #: CUBIC connection takes when it opens.
    tcp_cubic: CubicParams = DEFAULT_PARAMS
    #: Loss detection (Linux net.ipv4.tcp_recovery): 0x1 RACK-TLP marks segments lost by
    #: time (the default), 0x2 keeps RACK's reordering window static, 0x4 gives RACK a
    #: window even when three segments are SACKed; 0 recovers on duplicate ACKs (RFC 6675).
    tcp_recovery: int = 1
    #: Tail loss probes (Linux net.ipv4.tcp_early_retrans): on at 3 (default) and 4.
    tcp_early_retrans: int = 3
    #: F-RTO (Linux net.ipv4.tcp_frto, RFC 5682): after an RTO, new data goes out before
    #: more retransmissions, and an ACK of never-retransmitted data undoes the timeout's
    #: cwnd reduction (2, the default, and 1: on; 0: off).
    tcp_frto: int = 2
    #: The fewest segments Linux puts in one TSO packet (net.ipv4.tcp_min_tso_segs, 1-127):
    #: rcunet sends MSS-sized segments, and a burst's segments carry PSH where Linux's
    #: TSO packets end.
    tcp_min_tso_segs: int = 2
    #: Congestion window restart (Linux net.ipv4.tcp_slow_start_after_idle, RFC 5681
    #: §4.1): a write after more than an RTO with nothing in flight shrinks cwnd toward
    #: the initial window, halving it per RTO idle.  On by default, as in Linux.
    tcp_slow_start_after_idle: bool = True
    udp_rmem_default: int = 212992
    #: The most a socket's SO_RCVBUF / SO_SNDBUF may ask for (Linux net.core.rmem_max /
    #: wmem_max; the kernel then doubles it).
    rmem_max: int = 212992
    wmem_max: int = 212992
    #: Record lock statistics (acquisitions, contentions, wait/hold times).
    lock_stat: bool = False

    @classmethod
    def modern(cls, **overrides: object) -> Tuning:
        return dataclasses.replace(cls(), **overrides)  # type: ignore[arg-type]

    @classmethod
    def legacy(cls, **overrides: object) -> Tuning:
        flipped: dict[str, object] = {
            name: False for names in SEED_SWITCHES.values() for name in names}
        flipped.update(overrides)
        return dataclasses.replace(cls(), **flipped)  # type: ignore[arg-type]

    @classmethod
    def preset(cls, name: str, **overrides: object) -> Tuning:
        if name == "modern":
            return cls.modern(**overrides)
        if name == "legacy":
            return cls.legacy(**overrides)
        raise ValueError(f"unknown tuning preset {name!r} (expected 'modern' or 'legacy')")

    def seed_is_modern(self, seed: str) -> bool:
        return all(getattr(self, name) for name in SEED_SWITCHES[seed])
