"""Linux's receive-window arithmetic: the first window, the clamp, and the window offered
once data flows.

Linux advertises a window from the space its receive buffer leaves once skb overhead is
taken off: ``tcp_win_from_space`` scales the buffer by ``tp->scaling_ratio``, which
starts at TCP_DEFAULT_SCALING_RATIO (one half) and is re-measured from a segment's
payload over its truesize (``tcp_measure_rcv_mss``).  So the SYN and the SYN,ACK, sent
before any data, offer half the buffer (``tcp_full_space``), as
``tcp_select_initial_window`` rounds it:

* the space is bounded by the window clamp, then rounded down to a multiple of the
  MSS the peer will send (our MSS, less the 12 bytes of a timestamp option when both
  SYNs carry one);
* the window scale is chosen for the largest the window may ever grow to,
  max(space, tcp_rmem[2], rmem_max), bounded by the clamp (``ilog2(space) - 15``,
  which is the smallest shift that fits the 16-bit field, RFC 7323 §2.2).

``tcp_init_buffer_space`` then keeps one segment of the full space in reserve in the
clamp.  Once data flows every received segment is charged its truesize (``rx_truesize``:
the memory Linux's tun driver gives a packet of that size), the free space is the
buffer less those charges at the measured ratio (``tcp_space``), and the window offered
(``select_window``, __tcp_select_window) never exceeds ``rcv_ssthresh``, which grows
with the segments received (``grow_increment``, tcp_grow_window).  The receiver
(rcunet.core.tcp.receiver) keeps that state and applies tcp_select_window's no-shrink
rule.
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


def buffer_space_clamp(maxwin: int, clamp: int, advmss: int) -> int:
    """tcp_init_buffer_space: the window clamp from ESTABLISHED on.

    ``maxwin`` is tcp_full_space.  A clamp at or above it becomes it; tcp_app_win then
    keeps one segment in reserve: max(2 * advmss, full space - advmss).
    """
    if clamp >= maxwin:
        clamp = maxwin
        if maxwin > 4 * advmss:
            clamp = max(maxwin - (maxwin >> TCP_APP_WIN), 4 * advmss)
    if clamp > 2 * advmss and clamp + advmss > maxwin:
        clamp = max(2 * advmss, maxwin - advmss)
    return clamp


# ---------------------------------------------------------------- once data flows

#: TCP_RMEM_TO_WIN_SCALE: ``scaling_ratio`` is a fraction of 1 << 8.
RMEM_TO_WIN_SCALE = 8
#: TCP_DEFAULT_SCALING_RATIO: one half, until tcp_measure_rcv_mss measures one.
DEFAULT_SCALING_RATIO = 1 << (RMEM_TO_WIN_SCALE - 1)
#: SOCK_MIN_RCVBUF / 2: the smallest clamp tcp_set_window_clamp sets.
MIN_WINDOW_CLAMP = 2304 // 2

# The memory one received segment takes (its skb's truesize), as the tun driver that
# packetdrill writes into allocates it (tun_alloc_skb): a segment under a page is one
# kmalloc'ed linear buffer (its size rounded up to the slab's power of two, plus the
# skb_shared_info behind it and the struct sk_buff); a larger one gets a small head and
# page chunks of up to order PAGE_ALLOC_COSTLY_ORDER (alloc_skb_with_frags), each charged
# whole.  The head's 512 bytes are what Linux's tcp_ooo_rcv_mss selftest implies.
PAGE_SIZE = 4096
PAGE_ALLOC_COSTLY_ORDER = 3
SKB_STRUCT_SIZE = 256  #: SKB_DATA_ALIGN(sizeof(struct sk_buff))
SKB_SHINFO_SIZE = 320  #: SKB_DATA_ALIGN(sizeof(struct skb_shared_info))
SKB_SMALL_HEAD_TRUESIZE = 512
SKB_EMPTY_TRUESIZE = SKB_STRUCT_SIZE + SKB_SHINFO_SIZE  #: SKB_TRUESIZE(0)
#: IPv4 and TCP headers of a received segment (what the linear buffer also holds).
RX_HEADER_BYTES = 40


def rx_truesize(length: int) -> int:
    """skb->truesize of a received segment of ``length`` payload bytes."""
    total = length + RX_HEADER_BYTES
    if total < PAGE_SIZE:
        head = -(-total // 64) * 64 + SKB_SHINFO_SIZE  # SKB_HEAD_ALIGN
        return (1 << (head - 1).bit_length()) + SKB_STRUCT_SIZE  # kmalloc_size_roundup
    truesize = SKB_SMALL_HEAD_TRUESIZE
    order = PAGE_ALLOC_COSTLY_ORDER
    while total > 0:
        pages = -(-total // PAGE_SIZE)
        while order and pages < 1 << order:
            order -= 1
        truesize += PAGE_SIZE << order
        total -= PAGE_SIZE << order
    return truesize


def win_from_space(ratio: int, space: int) -> int:
    """__tcp_win_from_space: the window ``space`` bytes of buffer hold at ``ratio``."""
    return (space * ratio) >> RMEM_TO_WIN_SCALE


def space_from_win(ratio: int, window: int) -> int:
    """__tcp_space_from_win: the buffer memory a window of ``window`` bytes takes."""
    return (window << RMEM_TO_WIN_SCALE) // ratio


def measured_ratio(length: int, truesize: int) -> int:
    """tcp_measure_rcv_mss's new scaling_ratio: payload over truesize, at least 1
    (a u8 in Linux: at most 255)."""
    return min(max((length << RMEM_TO_WIN_SCALE) // truesize, 1), 255)


def grow_increment(ratio: int, length: int, truesize: int, rcv_ssthresh: int,
                   rmem_max: int, advmss: int, rcv_mss: int) -> int:
    """tcp_grow_window's increment of rcv_ssthresh for one segment (before the room
    bound), 0 for none: two advertised MSS when the segment's overhead is small enough
    that the window it opens will fit the buffer (check #2), else __tcp_grow_window's
    search, which allows growth only while rcv_ssthresh is small against tcp_rmem[2]."""
    if win_from_space(ratio, truesize) <= length:
        incr = 2 * advmss
    else:
        incr = 0
        half_truesize = win_from_space(ratio, truesize) >> 1
        window = win_from_space(ratio, rmem_max) >> 1
        while rcv_ssthresh <= window:
            if half_truesize <= length:
                incr = 2 * rcv_mss
                break
            half_truesize >>= 1
            window >>= 1
    if incr:
        incr = max(incr, 2 * length)
    return incr


def select_window(free_space: int, allowed_space: int, window_clamp: int,
                  rcv_ssthresh: int, rcv_wnd: int, mss: int, wscale: int,
                  shrink: bool) -> int:
    """__tcp_select_window: the window (bytes) to offer now, before tcp_select_window's
    no-shrink rule.

    ``free_space`` is tcp_space (the buffer's free bytes as window, may be negative),
    ``allowed_space`` tcp_full_space, ``rcv_wnd`` the window offered last, ``mss`` the
    peer's segment size as we estimate it (icsk_ack.rcv_mss).  Below half the full space
    the window is offered only if at least one MSS and 1/16 of the buffer (else zero);
    it never exceeds rcv_ssthresh; without a window scale it is a multiple of the MSS,
    kept unchanged while within one MSS of the free space.  ``shrink``: tcp_shrink_window
    with a window scale in use, where the free space is rounded down, never up.
    """
    full_space = min(window_clamp, allowed_space)
    if mss > full_space:
        mss = full_space
        if mss <= 0:
            return 0
    unit = 1 << wscale
    shrink = shrink and wscale > 0
    if shrink:
        free_space -= free_space % unit  # round_down to the scale
    if free_space < full_space >> 1:
        if not shrink:
            free_space -= free_space % unit  # never increased by the scale
        if free_space < allowed_space >> 4 or free_space < mss or free_space < (
                unit if shrink else 0):
            return 0
    free_space = min(free_space, rcv_ssthresh)
    if wscale:
        # advertise enough that it is not scaled away (ALIGN up), unless shrinking
        return free_space if shrink else -(-free_space // unit) * unit
    window = rcv_wnd
    if window <= free_space - mss or window > free_space:
        window = free_space - free_space % mss  # rounddown(free_space, mss)
    elif mss == full_space and free_space > window + (full_space >> 1):
        window = free_space
    return window


__all__ = ["DEFAULT_SCALING_RATIO", "MAX_WSCALE", "buffer_space_clamp", "full_space",
           "grow_increment", "initial_window", "initial_wscale", "measured_ratio",
           "rx_truesize", "select_window", "space_from_win", "win_from_space"]
