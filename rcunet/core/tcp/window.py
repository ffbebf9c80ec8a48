"""Linux's receive-window arithmetic for the window we offer first, and its clamp.

Linux advertises a window from the space its receive buffer leaves once skb overhead is
taken off: ``tcp_win_from_space`` scales the buffer by ``tp->scaling_ratio``, which
starts at TCP_DEFAULT_SCALING_RATIO (one half) and is only re-measured once data
arrives (``tcp_measure_rcv_mss``, from each skb's payload over its truesize).  So the
SYN and the SYN,ACK, sent before any data, offer exactly half the buffer
(``tcp_full_space``), as ``tcp_select_initial_window`` rounds it:

* the space is bounded by the window clamp, then rounded down to a multiple of the
  MSS the peer will send (our MSS, less the 12 bytes of a timestamp option when both
  SYNs carry one);
* the window scale is chosen for the largest the window may ever grow to,
  max(space, tcp_rmem[2], rmem_max), bounded by the clamp (``ilog2(space) - 15``,
  which is the smallest shift that fits the 16-bit field, RFC 7323 §2.2).

An application that fixed SO_RCVBUF also fixes the clamp at ``tcp_full_space``
(``tcp_openreq_init_rwin``, ``tcp_connect_init``), and ``tcp_init_buffer_space`` then
keeps one segment of it in reserve (tcp_app_win): the window never exceeds the clamp
for the rest of the connection.  Once data flows, rcunet accounts payload bytes only (a
scaling ratio of one, what Linux measures for full-sized segments), so later windows
are the buffer's free bytes within that clamp.
"""

from __future__ import annotations

#: RFC 7323 §2.3 (Linux TCP_MAX_WSCALE).
MAX_WSCALE = 14
#: TCP_DEFAULT_SCALING_RATIO over 1 << TCP_RMEM_TO_WIN_SCALE: one half.
DEFAULT_SCALING_SHIFT = 1
#: Bytes of the aligned timestamp option (TCPOLEN_TSTAMP_ALIGNED).
TS_OPTION_BYTES = 12
#: sysctl_tcp_app_win's default: the fraction (1/2**31) of the window kept for the
#: application; its only effect at that value is the one-segment reserve below.
TCP_APP_WIN = 31


def full_space(rcvbuf: int) -> int:
    """tcp_full_space before any data: tcp_win_from_space with the default ratio."""
    return rcvbuf >> DEFAULT_SCALING_SHIFT


def initial_window(rcvbuf: int, clamp: int, mss: int) -> int:
    """tcp_select_initial_window's ``rcv_wnd``: the first window, in bytes (unscaled).

    ``clamp`` is the socket's window clamp (0: none), ``mss`` the segment size the peer
    will use (advmss, less a timestamp option).
    """
    space = full_space(rcvbuf)
    if clamp:
        space = min(space, clamp)
    if mss > 0 and space > mss:
        space -= space % mss  # rounddown(space, mss)
    return space


def initial_wscale(space: int, clamp: int) -> int:
    """tcp_select_initial_window's ``rcv_wscale`` for ``space`` (already the max of the
    window, tcp_rmem[2] and rmem_max): ilog2 of it, bounded by the clamp, minus 15."""
    if clamp:
        space = min(space, clamp)
    return min(max(space.bit_length() - 1 - 15, 0), MAX_WSCALE)


def buffer_space_clamp(rcvbuf: int, clamp: int, advmss: int) -> int:
    """tcp_init_buffer_space: the window clamp from ESTABLISHED on (0: none).

    A clamp at or above the full space becomes the full space; tcp_app_win then keeps
    one segment in reserve: max(2 * advmss, full space - advmss).
    """
    if not clamp:
        return 0
    maxwin = full_space(rcvbuf)
    if clamp >= maxwin:
        clamp = maxwin
        if maxwin > 4 * advmss:
            clamp = max(maxwin - (maxwin >> TCP_APP_WIN), 4 * advmss)
    if clamp > 2 * advmss and clamp + advmss > maxwin:
        clamp = max(2 * advmss, maxwin - advmss)
    return clamp


__all__ = ["MAX_WSCALE", "buffer_space_clamp", "full_space", "initial_window",
           "initial_wscale"]
