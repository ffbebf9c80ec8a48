"""Congestion window restart after an idle period (RFC 5681 §4.1, RFC 2861), as Linux
does it when net.ipv4.tcp_slow_start_after_idle is on: tcp_slow_start_after_idle_check
runs as a write queues a new skb (tcp_skb_entail) with nothing in flight, and when the
last data went out more than an RTO ago, tcp_cwnd_restart shrinks cwnd.  Pure."""

from __future__ import annotations


def idle_restart_due(*, enabled: bool, in_flight: bool, last_data_sent_at: int | None,
                     now: int, rto: int) -> bool:
    """tcp_slow_start_after_idle_check: the sysctl is on, no segment is in flight
    (packets_out == 0) and data last went out (lsndtime) more than ``rto`` ago.  A
    connection that never sent data still has its initial window: nothing to restart."""
    return (enabled and not in_flight and last_data_sent_at is not None
            and now - last_data_sent_at > rto)


def restarted_cwnd(cwnd: int, init_cwnd: int, idle: int, rto: int) -> int:
    """tcp_cwnd_restart's window, in segments: halved once per RTO idle beyond the
    first, never below min(initial window, cwnd) (the restart window, RFC 5681 §4.1)."""
    restart = min(init_cwnd, cwnd)
    idle -= rto
    while idle > 0 and cwnd > restart:
        cwnd >>= 1
        idle -= rto
    return max(cwnd, restart)


def current_ssthresh(cwnd: int, ssthresh: int, reducing: bool) -> int:
    """tcp_current_ssthresh, in segments: ssthresh as it is while cwnd is being reduced
    (CWR or Recovery), else at least three quarters of cwnd."""
    if reducing:
        return ssthresh
    return max(ssthresh, (cwnd >> 1) + (cwnd >> 2))
