"""The pacing rate and the TSO packet size it gives (Linux tcp_update_pacing_rate and
tcp_tso_autosize): how many segments Linux's tcp_write_xmit puts in one skb it sends,
which is where the segments of a burst carry PSH (``Sender.transmit``) and what
TCP_INFO's tcpi_pacing_rate shows.  Pure functions of the connection's numbers."""

from __future__ import annotations

from rcunet.core.tcp.congestion.base import INITIAL_SSTHRESH
from rcunet.core.tcp.prr import INFINITE_SSTHRESH

#: net.ipv4.tcp_pacing_ss_ratio / tcp_pacing_ca_ratio (Linux's defaults).
PACING_SS_RATIO, PACING_CA_RATIO = 200, 120
#: sk_pacing_shift's default: a TSO packet holds about 1 ms of the pacing rate.
PACING_SHIFT = 10
#: net.ipv4.tcp_tso_rtt_log's default: below 2^9 µs of min_rtt TSO packets grow.
TSO_RTT_LOG = 9
#: sk_gso_max_size of a device without BIG TCP (GSO_LEGACY_MAX_SIZE).
GSO_MAX_SIZE = 65536
#: net.ipv4.tcp_min_tso_segs's default.
MIN_TSO_SEGS = 2


def ssthresh_segments(ssthresh: int, mss: int) -> int:
    """tp->snd_ssthresh in segments; not yet set (rcunet's "arbitrarily high" bytes) is
    Linux's TCP_INFINITE_SSTHRESH."""
    if ssthresh >= INITIAL_SSTHRESH:
        return INFINITE_SSTHRESH
    return min(ssthresh // mss, INFINITE_SSTHRESH)


def pacing_rate(mss: int, cwnd: int, ssthresh: int, packets_out: int, srtt_us: int) -> int:
    """tcp_update_pacing_rate (each ACK sets sk_pacing_rate; this evaluates it on the
    values that ACK left): bytes per second, 200% of mss * cwnd / srtt while cwnd is below
    half of ssthresh (tcp_pacing_ss_ratio), 120% after (tcp_pacing_ca_ratio); without an
    RTT sample the rate is not divided (Linux's srtt_us 0).  ``cwnd``, ``ssthresh`` and
    ``packets_out`` in segments."""
    rate = mss * ((1_000_000 // 100) << 3)
    rate *= PACING_SS_RATIO if cwnd < ssthresh // 2 else PACING_CA_RATIO
    rate *= max(cwnd, packets_out)
    srtt8 = srtt_us << 3  # tp->srtt_us is 8 * srtt in µs
    return rate // srtt8 if srtt8 else rate


def tso_autosize(rate: int, mss: int, min_rtt_us: int, min_tso_segs: int) -> int:
    """tcp_tso_autosize: the segments one TSO packet takes -- about 1 ms of the pacing
    rate, more on a path whose min_rtt is short (tcp_tso_rtt_log), at most a GSO
    packet, at least tcp_min_tso_segs."""
    size = rate >> PACING_SHIFT
    # no sample yet: tcp_min_rtt is ~0U (tcp_init_sock), which earns no extra bytes
    r = (min_rtt_us >> TSO_RTT_LOG) if min_rtt_us else 32
    if r < 32:  # BITS_PER_TYPE(sk->sk_gso_max_size)
        size += GSO_MAX_SIZE >> r
    size = min(size, GSO_MAX_SIZE)
    return max(size // mss, min_tso_segs)
