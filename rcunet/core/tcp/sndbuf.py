"""Linux's send-side memory arithmetic: the send queue weighed as skbs (sk_wmem_queued),
when a write may start another skb (sk_stream_memory_free) and when a waiting writer is
told it may write again (sk_stream_write_space).

Linux charges the send queue by skb truesize.  Each skb tcp_stream_alloc_skb allocates
costs the truesize of an empty skb with a MAX_TCP_HEADER head (``TX_SKB_TRUESIZE``), and
every byte copied into its page fragments one more (skb_copy_to_page_nocache).  A write
(tcp_sendmsg_locked) fills the unsent tail skb up to size_goal and asks for memory only
before it starts a new skb, so the queue may pass sk_sndbuf by up to one skb.  An skb is
split where a transmission stops inside it (tso_fragment, tcp_fragment: one more empty
skb is charged), freed when acknowledged whole, and trimmed by the bytes acknowledged
when acknowledged in part (tcp_trim_head).

rcunet's send queue is one byte stream (rcunet.core.tcp.buffers.SendQueue); ``SendSkbs``
keeps only where Linux's skbs would end, which is all this arithmetic needs:
sk_wmem_queued is the bytes queued plus one empty truesize per skb.  Segments are still
cut by the sender's own rules; SACK's skb shifting and the retransmission collapse
(tcp_shift_skb_data, tcp_retrans_try_collapse), which merge skbs, are not modelled.

Concurrency: none; owned by one ``Sender`` (its socket lock).
"""

from __future__ import annotations

from collections import deque

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.core.tcp.window import SKB_SHINFO_SIZE, SKB_STRUCT_SIZE
from rcunet.wire.seqnum import lt

#: MAX_TCP_HEADER: L1_CACHE_ALIGN(128 + MAX_HEADER), MAX_HEADER 176 on x86-64 builds
#: with tunnels and LL_MAX_HEADER 128.
MAX_TCP_HEADER = 320
#: GRO_MAX_HEAD (MAX_HEADER + 128) + NET_SKB_PAD (64) + NET_IP_ALIGN (0): the small head
#: cache is sized for it too (Linux 6.14 and later).
GRO_MAX_HEAD_PAD = 368
L1_CACHE_BYTES = 64


def _data_align(size: int) -> int:
    """SKB_DATA_ALIGN: rounded up to the cache line."""
    return -(-size // L1_CACHE_BYTES) * L1_CACHE_BYTES


#: SKB_SMALL_HEAD_CACHE_SIZE: SKB_HEAD_ALIGN of the larger of the two heads (not a
#: power of two, so kept as is); tcp_stream_alloc_skb's head comes from this cache.
SKB_SMALL_HEAD_CACHE_SIZE = _data_align(max(MAX_TCP_HEADER, GRO_MAX_HEAD_PAD)) + SKB_SHINFO_SIZE
#: skb->truesize of an empty send skb: SKB_TRUESIZE(skb_end_offset), the head less its
#: skb_shared_info, plus struct sk_buff and skb_shared_info.
TX_SKB_TRUESIZE = SKB_SMALL_HEAD_CACHE_SIZE - SKB_SHINFO_SIZE + SKB_STRUCT_SIZE + SKB_SHINFO_SIZE
#: SOCK_MIN_SNDBUF: 2 * (2048 + SKB_DATA_ALIGN(sizeof(struct sk_buff))).
SOCK_MIN_SNDBUF = 2 * (2048 + SKB_STRUCT_SIZE)
#: tcp_notsent_lowat's "no mark" value.
NO_LOWAT = 0xFFFFFFFF


def memory_free(queued: int, sndbuf: int, notsent: int, lowat: int, wake: bool = False) -> bool:
    """__sk_stream_memory_free with tcp_stream_memory_free: a write may start a new skb
    while the queue is below sk_sndbuf and the unsent bytes below the not-sent low-water
    mark; a wakeup (``wake``) asks for the unsent bytes below half the mark."""
    if queued >= sndbuf:
        return False
    return lowat >= NO_LOWAT or (notsent << 1 if wake else notsent) < lowat


def is_writeable(queued: int, sndbuf: int, notsent: int, lowat: int, wake: bool = False) -> bool:
    """__sk_stream_is_writeable: at least a third of the buffer free (sk_stream_wspace >=
    sk_stream_min_wspace, half of what is queued) and ``memory_free``.  tcp_poll asks it
    with ``wake`` false; sk_stream_write_space, which wakes a waiting writer, with it
    true."""
    return (sndbuf - queued >= queued >> 1
            and memory_free(queued, sndbuf, notsent, lowat, wake))


def sndbuf_expand(sndbuf: int, sndbuf_max: int, mss: int, segments: int) -> int:
    """tcp_sndbuf_expand: room for two flights (CUBIC's and Reno's factor: fast recovery
    needs 1.7, rounded up) of ``segments`` skbs of one ``mss`` each, counted at their
    worst-case truesize (a kmalloc'ed head of the segment, MAX_TCP_HEADER and the
    skb_shared_info, rounded up to a power of two, plus the struct sk_buff), up to
    ``sndbuf_max`` (tcp_wmem[2]); 0 to keep ``sndbuf``."""
    per_mss = mss + MAX_TCP_HEADER + SKB_SHINFO_SIZE
    per_mss = (1 << (per_mss - 1).bit_length()) + SKB_STRUCT_SIZE  # roundup_pow_of_two
    want = 2 * segments * per_mss
    return min(want, sndbuf_max) if sndbuf < want else 0


class SendSkbs:
    """Where the send queue's skbs end: absolute sequence numbers, in order, the first
    skb starting at the first unacknowledged byte.  ``tail_closed``: the last skb takes
    no more bytes (a MSG_EOR record's end or a MSG_ZEROCOPY skb: tcp_skb_can_collapse_to)."""

    __slots__ = lockfree_read_slots("ends", "tail_closed")  # as SendQueue's

    def __init__(self) -> None:
        self.ends: deque[int] = deque()
        self.tail_closed = False

    def __len__(self) -> int:
        return len(self.ends)

    def overhead(self) -> int:
        """The truesize the skbs cost beyond their bytes."""
        return len(self.ends) * TX_SKB_TRUESIZE

    def open_tail(self, first: int, snd_max: int) -> int | None:
        """Bytes in the last skb if a write may add to it: it is unsent (starts at or
        after ``snd_max``; ``first`` is where the first skb starts) and not closed."""
        ends = self.ends
        if not ends or self.tail_closed:
            return None
        start = ends[-2] if len(ends) > 1 else first
        if lt(start, snd_max):
            return None
        return (ends[-1] - start) & 0xFFFFFFFF

    def extend_tail(self, end: int) -> None:
        """The last skb now ends at ``end``."""
        self.ends[-1] = end

    def push(self, end: int, closed: bool = False) -> None:
        """A new skb ending at ``end`` (``closed``: no later byte joins it)."""
        self.ends.append(end)
        self.tail_closed = closed

    def split(self, seq: int) -> None:
        """A transmission stopped at ``seq``: the skb it stopped inside becomes two
        (tso_fragment, tcp_fragment).  Searched from the tail, where new data stops."""
        ends = self.ends
        i = len(ends) - 1
        while i >= 0 and lt(seq, ends[i]):
            i -= 1
        if i + 1 < len(ends) and (i < 0 or lt(ends[i], seq)):
            ends.insert(i + 1, seq)

    def acked(self, una: int) -> None:
        """SND.UNA moved to ``una``: the skbs it covers are freed (tcp_clean_rtx_queue); a
        partly acknowledged one stays, trimmed of its acknowledged bytes."""
        ends = self.ends
        while ends and not lt(una, ends[0]):
            ends.popleft()
        if not ends:
            self.tail_closed = False

    def clear(self) -> None:
        self.ends.clear()
        self.tail_closed = False


__all__ = ["NO_LOWAT", "SOCK_MIN_SNDBUF", "TX_SKB_TRUESIZE", "SendSkbs", "is_writeable",
           "memory_free", "sndbuf_expand"]
