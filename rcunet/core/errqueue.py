"""A socket's error queue (Linux ``sk->sk_error_queue``) and the MSG_ZEROCOPY completion
rule that fills it.

Linux keeps, per socket, a queue of "error" skbs each carrying a ``struct
sock_extended_err`` (``SKB_EXT_ERR``); ``recvmsg(MSG_ERRQUEUE)`` dequeues one
(``sock_dequeue_err_skb``) and returns it as a control message (``ip_recv_error``:
``SOL_IP``/``IP_RECVERR``, ``ipv6_recv_error``: ``SOL_IPV6``/``IPV6_RECVERR``) whose data is
the struct followed by the offender's address.  A non-empty queue makes ``poll`` report
``POLLERR`` (``tcp_poll``).

MSG_ZEROCOPY (``Documentation/networking/msg_zerocopy.rst``): each ``send`` with the flag
on a socket with ``SO_ZEROCOPY`` takes the next 32-bit id (``sk->sk_zckey``,
``msg_zerocopy_alloc``); when every byte of that send has left the stack (TCP: the skbs
holding it were acknowledged and freed), a notification ``ee_origin =
SO_EE_ORIGIN_ZEROCOPY``, ``ee_info = lo``, ``ee_data = hi`` is queued
(``__msg_zerocopy_callback``).  Two ranges meet in one entry: a send that appends to the
previous zerocopy send's still-unsent tail extends its id range
(``msg_zerocopy_realloc``), and a completion whose range follows the tail entry's is
merged into it (``skb_zerocopy_notify_extend``).  rcunet copies (or, for immutable
``bytes``, references) the data, so every notification carries
``SO_EE_CODE_ZEROCOPY_COPIED``, as Linux's does when the skb had to be copied.

Pure: sequence numbers and ids are plain ints; the host calls these under the socket lock.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

from rcunet.core.freethreaded import lockfree_read_slots

#: linux/errqueue.h
SO_EE_ORIGIN_NONE = 0
SO_EE_ORIGIN_LOCAL = 1
SO_EE_ORIGIN_ICMP = 2
SO_EE_ORIGIN_ICMP6 = 3
SO_EE_ORIGIN_TIMESTAMPING = 4  # SO_EE_ORIGIN_TXSTATUS
SO_EE_ORIGIN_ZEROCOPY = 5
SO_EE_CODE_ZEROCOPY_COPIED = 1
#: struct sock_extended_err: u32 ee_errno, u8 origin, type, code, pad, u32 info, u32 data
EXTENDED_ERR = struct.Struct("=IBBBBII")
#: msg_zerocopy_realloc's limits for extending a range: at most USHRT_MAX - 1 ids, and
#: 512 KB of bytes ("limit to a few TSO")
ZC_MAX_IDS = 0xFFFF - 1
ZC_BYTE_LIMIT = 1 << 19
_MASK32 = 0xFFFFFFFF
_HALF32 = 1 << 31


@dataclass(slots=True)
class ExtendedErr:
    """One ``struct sock_extended_err``."""

    ee_errno: int = 0
    ee_origin: int = SO_EE_ORIGIN_NONE
    ee_type: int = 0
    ee_code: int = 0
    ee_info: int = 0
    ee_data: int = 0

    def pack(self) -> bytes:
        return EXTENDED_ERR.pack(self.ee_errno, self.ee_origin, self.ee_type, self.ee_code,
                                 0, self.ee_info & _MASK32, self.ee_data & _MASK32)

    @classmethod
    def unpack(cls, raw: bytes) -> ExtendedErr:
        errno_, origin, type_, code, _pad, info, data = EXTENDED_ERR.unpack_from(raw)
        return cls(errno_, origin, type_, code, info, data)


@dataclass(slots=True)
class ErrEntry:
    """One skb of the error queue: its extended error and its payload (empty for a
    zerocopy notification)."""

    ee: ExtendedErr
    payload: bytes = b""


class ErrorQueue:
    """``sk_error_queue``: FIFO of ``ErrEntry``.  Not thread-safe: the host guards it with
    the socket lock (Linux: the queue's spinlock)."""

    __slots__ = lockfree_read_slots("_q")

    def __init__(self) -> None:
        self._q: deque[ErrEntry] = deque()

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def queue(self, entry: ErrEntry) -> None:
        self._q.append(entry)

    def dequeue(self) -> ErrEntry | None:
        """``sock_dequeue_err_skb``: the oldest entry, or None when empty."""
        return self._q.popleft() if self._q else None

    def zerocopy_done(self, lo: int, length: int, copied: bool = True) -> None:
        """``__msg_zerocopy_callback``: ids ``lo .. lo+length-1`` completed.  Merged into
        the tail entry when that is a zerocopy notification whose range ends just before
        ``lo`` and the sum stays below 2**32 ids (``skb_zerocopy_notify_extend``), else
        queued as a new entry."""
        if length <= 0:
            return  # every id of the range was given back (an aborted send)
        tail = self._q[-1].ee if self._q else None
        if tail is not None and tail.ee_origin == SO_EE_ORIGIN_ZEROCOPY:
            old_lo, old_hi = tail.ee_info, tail.ee_data
            total = ((old_hi - old_lo) & _MASK32) + 1 + length
            if total < (1 << 32) and lo == (old_hi + 1) & _MASK32:
                tail.ee_data = (old_hi + length) & _MASK32
                return
        hi = (lo + length - 1) & _MASK32
        self._q.append(ErrEntry(ExtendedErr(
            ee_origin=SO_EE_ORIGIN_ZEROCOPY,
            ee_code=SO_EE_CODE_ZEROCOPY_COPIED if copied else 0, ee_info=lo, ee_data=hi)))


@dataclass(slots=True)
class ZcRange:
    """One ``ubuf_info_msgzc``: ids ``lo .. lo+count-1`` whose bytes end at ``end_seq``."""

    lo: int
    count: int
    nbytes: int
    end_seq: int


class Zerocopy:
    """A socket's MSG_ZEROCOPY bookkeeping: the next id (``sk_zckey``) and the ranges whose
    bytes are still queued, oldest first.  Sequence numbers are TCP's (mod 2**32)."""

    __slots__ = lockfree_read_slots("key", "pending")

    def __init__(self) -> None:
        self.key = 0
        self.pending: deque[ZcRange] = deque()

    def sent(self, nbytes: int, end_seq: int, tail_unsent: bool, first: bool) -> None:
        """A MSG_ZEROCOPY send queued ``nbytes`` more, its data now ending at
        ``end_seq``.  ``first``: the first bytes this send call queued (it takes an id
        then: a call that queues nothing gives its id back, ``msg_zerocopy_put_abort``);
        later rounds of one blocking call extend its range's bytes.  ``tail_unsent``: the
        bytes before this send were the previous range's and still unsent (the write
        queue's tail skb is that range's: ``msg_zerocopy_realloc`` extends it)."""
        last = self.pending[-1] if self.pending else None
        if not first and last is not None:
            last.nbytes += nbytes
            last.end_seq = end_seq
            return
        if (last is not None and tail_unsent and last.count < ZC_MAX_IDS
                and last.nbytes + nbytes <= ZC_BYTE_LIMIT
                and (last.lo + last.count) & _MASK32 == self.key):
            last.count += 1
            last.nbytes += nbytes
            last.end_seq = end_seq
        else:
            self.pending.append(ZcRange(self.key, 1, nbytes, end_seq))
        self.key = (self.key + 1) & _MASK32

    def acked(self, snd_una: int, errq: ErrorQueue) -> bool:
        """Ranges whose last byte is below ``snd_una`` (the first unacknowledged data
        byte) complete, in order, into ``errq``.  True when anything was queued."""
        done = False
        pending = self.pending
        while pending and ((snd_una - pending[0].end_seq + _HALF32) & _MASK32) - _HALF32 >= 0:
            rng = pending.popleft()
            errq.zerocopy_done(rng.lo, rng.count)
            done = True
        return done

    def purge(self, errq: ErrorQueue | None) -> bool:
        """The send queue was dropped (``tcp_write_queue_purge`` on a reset): every range
        completes into ``errq``; with None (the socket is dead, ``SOCK_DEAD``) they are
        forgotten.  True when anything was queued."""
        done = False
        while self.pending:
            rng = self.pending.popleft()
            if errq is not None:
                errq.zerocopy_done(rng.lo, rng.count)
                done = True
        return done
