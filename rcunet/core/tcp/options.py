"""Per-connection settings: socket options and the sysctls that reach TCP (Linux names).

Durations are int nanoseconds (``*_timeout``/``*_delay``), sizes bytes.  Defaults are
Linux's unless a comment says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from typing import Any

from rcunet.core.tcp.congestion.cubic_params import DEFAULT_PARAMS, CubicParams

MS = 1_000_000
SECOND = 1_000_000_000
#: Linux's jiffy at HZ=1000: TCP_RTO_MIN_US and TCP_DELACK_MAX_US are kept in jiffies
#: (usecs_to_jiffies rounds up), so a value reads back rounded up to whole ms.
JIFFY = MS
#: Options objects remembered per (frozen tuning, overrides): a connection is opened with
#: one of a few combinations, and building a 30-field frozen dataclass costs microseconds.
_MEMO_MAX = 256
_memo: dict[tuple[Any, ...], tuple[object, Options]] = {}
_sndbuf_memo: dict[tuple[int, int], tuple[Options, Options]] = {}


def jiffies_ns(usecs: int) -> int:
    """``usecs_to_jiffies`` at HZ=1000, in ns: microseconds rounded up to a jiffy."""
    return -(-usecs * 1000 // JIFFY) * JIFFY


@dataclass(frozen=True, slots=True)
class Options:
    #: Our MSS: route MTU minus 40 (IPv4) or 60 (IPv6).  Sent in the MSS option.
    mss: int = 1460
    #: The path's MSS when a learned path MTU is below the route's (0: ``mss``): what
    #: tcp_sync_mss bounds the send MSS by, while the MSS option still says ``mss``
    #: (dst_metric_advmss).
    path_mss: int = 0
    #: Peer MSS assumed when its SYN carries none (RFC 9293 §3.7.1: 536 for IPv4, 1220 for IPv6).
    default_peer_mss: int = 536
    #: Smallest peer MSS honoured (Linux tcp_min_snd_mss; CVE-2019-11479).
    min_snd_mss: int = 48
    rcvbuf: int = 131072  #: receive buffer: bounds the window and all buffered input
    #: Receive-buffer autotuning ceiling (Linux tcp_rmem[2] with tcp_moderate_rcvbuf):
    #: the buffer grows with the rate the application reads, as tcp_rcv_space_adjust
    #: does.  0: the buffer stays ``rcvbuf`` (SO_RCVBUF set: Linux's SOCK_RCVBUF_LOCK).
    rcvbuf_max: int = 0
    #: The largest window the window scale must be able to express (Linux
    #: tcp_select_initial_window: max(rcvbuf, tcp_rmem[2]) unless SO_RCVBUF fixed the
    #: buffer).  0: ``rcvbuf``.
    wscale_space: int = 0
    #: Linux tp->window_clamp: the most any window we offer may be, 0 for none.  SO_RCVBUF
    #: sets it to tcp_full_space of the fixed buffer (rcunet.core.tcp.window).
    window_clamp: int = 0
    #: tcp_rcvbuf_low_rtt (µs): below this receiver RTT autotuning grows the buffer in
    #: proportion to the RTT instead of doubling the rate (tcp_rcvbuf_grow)
    rcvbuf_low_rtt: int = 1000
    #: tcp_rmem[2] whatever the socket set: the bound tcp_grow_window compares against.
    rmem_limit: int = 6291456
    #: tcp_shrink_window: with a window scale in use, the offered window may shrink when
    #: the buffer fills (Linux 6.5+, __tcp_select_window); off, it never shrinks.
    shrink_window: bool = False
    sndbuf: int = 65536  #: send buffer: bytes ``send`` accepts before refusing more
    #: Send-buffer autotuning ceiling (Linux tcp_wmem[2]): at ESTABLISHED the buffer grows
    #: to two initial windows of full segments, as tcp_sndbuf_expand does.  0: the buffer
    #: stays ``sndbuf`` (an application that set SO_SNDBUF: Linux's SOCK_SNDBUF_LOCK).
    sndbuf_max: int = 0
    window_scaling: bool = True  #: tcp_window_scaling (RFC 7323 §2)
    timestamps: bool = True  #: tcp_timestamps (RFC 7323 §3)
    sack: bool = True  #: tcp_sack (RFC 2018)
    #: TCP_MD5SIG: a key covers the peer (RFC 2385), so every segment carries the
    #: 20-byte signature option (Linux tcp_header_len += TCPOLEN_MD5SIG_ALIGNED): the
    #: send MSS is 20 bytes less, a SYN offers no timestamps (tcp_syn_options), a
    #: SYN,ACK drops them when SACK is on (tcp_synack_options), and fewer SACK blocks fit.
    md5: bool = False
    #: tcp_ecn 0-5 (rcunet.core.tcp.accecn.TcpEcn): what a SYN asks for, what a SYN
    #: is answered with.  Linux's default: 2 (answer RFC 3168, never ask).
    ecn: int = 2
    ecn_fallback: bool = True  #: tcp_ecn_fallback
    ecn_option: int = 2  #: tcp_ecn_option 0-3 (AccECN option sending)
    ecn_option_beacon: int = 3  #: tcp_ecn_option_beacon: options per RTT at least
    nodelay: bool = False  #: TCP_NODELAY: disable Nagle (RFC 896, RFC 1122 §4.2.3.4)
    #: TCP_CORK: hold every partial segment (Linux TCP_NAGLE_CORK) until uncorked, a full
    #: segment forms, or the probe timer fires with nothing in flight
    cork: bool = False
    #: tcp_recovery bits (rcunet.core.tcp.rack): 0x1 RACK loss detection (Linux's
    #: default; 0: RFC 6675 duplicate-ACK recovery), 0x2 static reo_wnd, 0x4 no dupthresh
    recovery: int = 1
    #: tcp_early_retrans: 3 (Linux's default) and 4 send tail loss probes, others none
    early_retrans: int = 3
    #: tcp_frto: F-RTO (RFC 5682) detects a spurious retransmission timeout by sending
    #: new data after it, and undoes it (Linux's default 2: the SACK-enhanced version;
    #: any non-zero value enables it, as tcp_enter_loss reads it).  0: every RTO is a loss.
    frto: int = 2
    #: tcp_slow_start_after_idle: a write after more than an RTO with nothing in flight
    #: shrinks cwnd toward the initial window (RFC 5681 §4.1; rcunet.core.tcp.idle)
    slow_start_after_idle: bool = True
    congestion_control: str = "cubic"  #: "reno" (RFC 5681/6582) or "cubic" (Linux's)
    #: The tcp_cubic module parameters a CUBIC connection runs with.
    cubic: CubicParams = DEFAULT_PARAMS
    initial_cwnd: int = 10  #: segments (RFC 6928; Linux TCP_INIT_CWND)
    #: tcp_min_tso_segs: the fewest segments one burst's TSO packet takes
    #: (rcunet.core.tcp.pacing.tso_autosize), which is where its segments carry PSH
    min_tso_segs: int = 2
    rto_initial: int = 1 * SECOND  #: RFC 6298 §2.1 (Linux TCP_TIMEOUT_INIT)
    rto_fallback: int = 3 * SECOND  #: after a retransmitted SYN (RFC 6298 §5.7)
    #: icsk_rto_min: Linux TCP_RTO_MIN, else net.ipv4.tcp_rto_min_us or TCP_RTO_MIN_US
    #: (RFC 6298 §2.4 says 1 s)
    rto_min: int = 200 * MS
    #: icsk_rto_max: Linux TCP_RTO_MAX, else net.ipv4.tcp_rto_max_ms or TCP_RTO_MAX_MS
    #: (RFC 6298 §2.5 allows >= 60 s)
    rto_max: int = 120 * SECOND
    syn_retries: int = 6  #: tcp_syn_retries
    synack_retries: int = 5  #: tcp_synack_retries
    retries2: int = 15  #: tcp_retries2 (Linux turns it into a time bound, see rto.py)
    delack_delay: int = 40 * MS  #: Linux TCP_DELACK_MIN (RFC 1122 §4.2.3.2: < 500 ms)
    #: icsk_delack_max: Linux TCP_DELACK_MAX, else TCP_DELACK_MAX_US; a delayed ACK
    #: waits at most this, and less than rto_min (rcunet.core.tcp.delack.delack_max)
    delack_max: int = 200 * MS
    time_wait_timeout: int = 60 * SECOND  #: 2MSL; Linux TCP_TIMEWAIT_LEN
    fin_timeout: int = 60 * SECOND  #: tcp_fin_timeout: orphaned FIN-WAIT-2 lifetime
    #: TCP_USER_TIMEOUT (ns; 0: off): how long transmitted data may stay unacknowledged,
    #: or zero-window probes and keepalive probes unanswered, before the connection is
    #: given up with ETIMEDOUT (Linux icsk_user_timeout, RFC 5482)
    user_timeout: int = 0
    #: TCP_NOTSENT_LOWAT, else net.ipv4.tcp_notsent_lowat: the socket is writable, and a
    #: write takes more bytes, only while fewer than this many are unsent
    #: (tcp_stream_memory_free).  Linux's default: UINT_MAX (off).
    notsent_lowat: int = 0xFFFFFFFF
    keepalive: bool = False  #: SO_KEEPALIVE
    keepalive_time: int = 7200 * SECOND  #: tcp_keepalive_time / TCP_KEEPIDLE
    keepalive_intvl: int = 75 * SECOND  #: tcp_keepalive_intvl / TCP_KEEPINTVL
    keepalive_probes: int = 9  #: tcp_keepalive_probes / TCP_KEEPCNT
    #: Challenge ACKs per second per connection (RFC 5961 §7; Linux tcp_challenge_ack_limit).
    challenge_ack_limit: int = 1000
    #: Minimum gap between duplicate ACKs for out-of-window segments (tcp_invalid_ratelimit).
    invalid_ratelimit: int = 500 * MS
    #: Out-of-order queue bound in distinct ranges (its bytes are bounded by the window).
    ofo_max_ranges: int = 256
    #: Header prediction (Connection._fast_path), an optimisation only: False sends every
    #: segment the full way, which must put the same segments on the wire (Linux has no
    #: switch for it; this one is for comparing the two paths).
    header_prediction: bool = True

    @classmethod
    def from_tuning(cls, tuning: object, **overrides: object) -> Options:
        """Options from a host's sysctls (``rcunet.tuning.Tuning`` or anything with the
        same attribute names), then ``overrides`` (socket options, route MSS).

        Duck-typed so that core/ does not import the host's configuration module.
        Seconds (Linux's unit for tcp_fin_timeout) become nanoseconds here.

        The result for a frozen dataclass ``tuning`` (``Tuning`` is one) is memoised:
        Options is immutable, so connections share it.
        """
        params = getattr(type(tuning), "__dataclass_params__", None)
        if params is None or not params.frozen:
            return cls._build(tuning, overrides)
        try:
            key = (id(tuning), cls, *((k, type(v), v) for k, v in sorted(overrides.items())))
            hash(key)
        except TypeError:  # an unhashable override value
            return cls._build(tuning, overrides)
        # atomic: dict subscript (pairs with the dict set below); not _memo.get, which on
        # free-threaded 3.13 spins on the dict's lock for this fresh key tuple
        # (rcunet.core.neigh's docstring).  KeyError also when a racing clear() won.
        try:
            found = _memo[key]
        except KeyError:
            found = None
        if found is not None and found[0] is tuning:  # the id was not reused
            return found[1]
        options = cls._build(tuning, overrides)
        if len(_memo) >= _MEMO_MAX:
            _memo.clear()  # atomic: dict clear; a racing reader rebuilds, nothing is lost
        _memo[key] = (tuning, options)  # atomic: dict set; keeps tuning alive (id stays its)
        return options

    @classmethod
    def _build(cls, tuning: object, overrides: dict[str, object]) -> Options:
        values: dict[str, object] = {}
        simple = {"tcp_timestamps": "timestamps", "tcp_sack": "sack",
                  "tcp_window_scaling": "window_scaling",
                  "tcp_congestion_control": "congestion_control",
                  "tcp_cubic": "cubic",
                  "tcp_syn_retries": "syn_retries", "tcp_synack_retries": "synack_retries",
                  "tcp_retries2": "retries2", "tcp_keepalive_probes": "keepalive_probes",
                  "tcp_notsent_lowat": "notsent_lowat", "tcp_ecn": "ecn",
                  "tcp_ecn_fallback": "ecn_fallback", "tcp_ecn_option": "ecn_option",
                  "tcp_ecn_option_beacon": "ecn_option_beacon",
                  "tcp_recovery": "recovery", "tcp_early_retrans": "early_retrans",
                  "tcp_frto": "frto", "tcp_min_tso_segs": "min_tso_segs",
                  "tcp_shrink_window": "shrink_window",
                  "tcp_rcvbuf_low_rtt": "rcvbuf_low_rtt",
                  "tcp_slow_start_after_idle": "slow_start_after_idle"}
        for sysctl, name in simple.items():
            if hasattr(tuning, sysctl):
                values[name] = getattr(tuning, sysctl)
        if hasattr(tuning, "tcp_rmem"):
            values["rcvbuf"] = int(tuning.tcp_rmem[1])
            values["wscale_space"] = int(tuning.tcp_rmem[2])
            values["rmem_limit"] = int(tuning.tcp_rmem[2])
            if getattr(tuning, "tcp_moderate_rcvbuf", True):
                values["rcvbuf_max"] = int(tuning.tcp_rmem[2])
        if hasattr(tuning, "tcp_wmem"):
            values["sndbuf"] = int(tuning.tcp_wmem[1])
        if hasattr(tuning, "tcp_rto_max_ms"):
            values["rto_max"] = int(tuning.tcp_rto_max_ms) * MS
        if hasattr(tuning, "tcp_rto_min_us"):
            values["rto_min"] = jiffies_ns(int(tuning.tcp_rto_min_us))
        for sysctl, name in (("tcp_fin_timeout", "fin_timeout"),
                             ("tcp_keepalive_time", "keepalive_time"),
                             ("tcp_keepalive_intvl", "keepalive_intvl")):
            if hasattr(tuning, sysctl):
                values[name] = int(float(getattr(tuning, sysctl)) * SECOND)
        values.update(overrides)
        for name in _BOOL_FIELDS.intersection(values):
            values[name] = bool(values[name])  # a sysctl written as Linux has it: 0 or 1
        options = cls(**values)  # type: ignore[arg-type]
        options.validate()
        return options

    def with_sndbuf(self, sndbuf: int) -> Options:
        """These options with another send buffer (autotuning), memoised like
        ``from_tuning``: connections of one socket configuration grow to the same size."""
        key = (id(self), sndbuf)
        try:
            found = _sndbuf_memo[key]  # atomic: dict subscript (not .get: from_tuning)
        except KeyError:
            found = None
        if found is not None and found[0] is self:  # the id was not reused
            return found[1]
        grown = replace(self, sndbuf=sndbuf)
        if len(_sndbuf_memo) >= _MEMO_MAX:
            _sndbuf_memo.clear()  # atomic: dict clear; a racing reader rebuilds
        _sndbuf_memo[key] = (self, grown)  # atomic: dict set; keeps self alive (its id)
        return grown

    def with_rcvbuf(self, rcvbuf: int) -> Options:
        """These options with a grown receive buffer (autotuning).  Not memoised: each
        connection grows to its own size, at most once per round trip."""
        return replace(self, rcvbuf=rcvbuf)

    @property
    def window_space(self) -> int:
        """Bytes the window scale is chosen for (RFC 7323 §2.2; tcp_select_initial_window:
        the most the window may grow to, bounded by the window clamp)."""
        space = max(self.rcvbuf, self.wscale_space)
        return min(space, self.window_clamp) if self.window_clamp else space

    def validate(self) -> None:
        """Raise ValueError on settings that cannot work."""
        if self.congestion_control not in ("reno", "cubic"):
            raise ValueError(f"unknown congestion control {self.congestion_control!r}")
        if not 88 <= self.mss <= 65495:
            raise ValueError(f"mss {self.mss} outside 88..65495")
        if not 0 <= self.ecn <= 5:
            raise ValueError(f"tcp_ecn {self.ecn} outside 0..5")
        if not 0 <= self.ecn_option <= 3:
            raise ValueError(f"tcp_ecn_option {self.ecn_option} outside 0..3")
        if self.rcvbuf < 1 or self.sndbuf < 1:
            raise ValueError("buffers must hold at least one byte")
        if (self.rcvbuf_max < 0 or self.sndbuf_max < 0 or self.wscale_space < 0
                or self.window_clamp < 0):
            raise ValueError("buffer ceilings must be >= 0")
        # (rto_min may pass rto_initial: net.ipv4.tcp_rto_min_us has no upper bound)
        if not (0 < self.rto_min and 0 < self.rto_initial <= self.rto_max):
            raise ValueError("need 0 < rto_min and 0 < rto_initial <= rto_max")
        if self.delack_max <= 0:
            raise ValueError("delack_max must be > 0")
        if not 1 <= self.min_tso_segs <= 255:  # a u8 with SYSCTL_ONE as its floor
            raise ValueError(f"tcp_min_tso_segs {self.min_tso_segs} outside 1..255")


#: The switches: a sysctl or socket option gives them as Linux has them (an int, 0 or 1),
#: and a compiled Options, whose fields are typed, accepts only a bool.
_BOOL_FIELDS = frozenset(field.name for field in fields(Options) if field.type in ("bool", bool))
