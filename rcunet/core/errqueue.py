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

SO_TIMESTAMPING on a byte stream (``Documentation/networking/timestamping.rst``): a write
asks for timestamps of its last byte (``tcp_tx_timestamp``: the skb holding it gets the
request, ``shinfo->tskey``; one request per skb, a later write into the same unsent skb
moves it).  SCM_TSTAMP_SCHED and SCM_TSTAMP_SND are reported each time a segment
carrying that byte is handed to the device (``__dev_queue_xmit``, ``skb_tx_timestamp``:
rcunet has no qdisc, both happen at transmission), SCM_TSTAMP_ACK once, when the
cumulative ACK first passes it (``tcp_ack_tstamp``).  Each is an error-queue entry with
``ee_errno = ENOMSG``, ``ee_origin = SO_EE_ORIGIN_TIMESTAMPING``, ``ee_info`` the type and,
with SOF_TIMESTAMPING_OPT_ID, ``ee_data`` the byte's offset from the key set at setsockopt
(``sk->sk_tskey``), and the time it happened.

Pure: sequence numbers, ids and times are plain ints; the host calls these under the
socket lock.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass

from rcunet.core.freethreaded import lockfree_read_slots
from rcunet.wire.seqnum import sub

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
#: A zerocopy skb holds at most MAX_SKB_FRAGS user pages (__zerocopy_sg_from_iter fails
#: with EMSGSIZE, tcp_sendmsg_locked then starts a new skb); each iovec element is at
#: least one page frag of its own (separate buffers do not coalesce)
MAX_SKB_FRAGS = 17
PAGE_SIZE = 4096
_MASK32 = 0xFFFFFFFF
#: What an error-queue skb costs besides its payload (an sk_buff and its shared info)
ENTRY_TRUESIZE = 512
ENOMSG = 42
#: linux/net_tstamp.h (SOF_TIMESTAMPING_*) and linux/errqueue.h (SCM_TSTAMP_*)
SOF_TX_SOFTWARE = 1 << 1
SOF_SOFTWARE = 1 << 4
SOF_OPT_ID = 1 << 7
SOF_TX_SCHED = 1 << 8
SOF_TX_ACK = 1 << 9
SOF_OPT_TSONLY = 1 << 11
SOF_OPT_ID_TCP = 1 << 16
SOF_MASK = (1 << 18) - 1  #: up to SOF_TIMESTAMPING_OPT_RX_FILTER
SCM_TSTAMP_SND, SCM_TSTAMP_SCHED, SCM_TSTAMP_ACK = 0, 1, 2


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
    #: the software timestamp (ns) of a timestamping entry, None for others
    tstamp_ns: int | None = None


class ErrorQueue:
    """``sk_error_queue``: FIFO of ``ErrEntry``.  Not thread-safe: the host guards it with
    the socket lock (Linux: the queue's spinlock).  ``charged``: the memory its entries
    hold (payload plus ``ENTRY_TRUESIZE`` each), what ``sock_queue_err_skb`` weighs
    against the receive buffer."""

    __slots__ = lockfree_read_slots("_q", "charged", "dropped")

    def __init__(self) -> None:
        self._q: deque[ErrEntry] = deque()
        self.charged = 0
        self.dropped = 0  #: entries refused for want of room

    def __len__(self) -> int:
        return len(self._q)

    def __bool__(self) -> bool:
        return bool(self._q)

    def queue(self, entry: ErrEntry, limit: int | None = None) -> bool:
        """Queue ``entry``; with ``limit`` (the receive buffer), refuse it when the queue
        would reach it (``sock_queue_err_skb``: ENOMEM, the timestamp is lost)."""
        size = len(entry.payload) + ENTRY_TRUESIZE
        if limit is not None and self.charged + size >= limit:
            self.dropped += 1
            return False
        self.charged += size
        self._q.append(entry)
        return True

    def dequeue(self) -> ErrEntry | None:
        """``sock_dequeue_err_skb``: the oldest entry, or None when empty."""
        if not self._q:
            return None
        entry = self._q.popleft()
        self.charged -= len(entry.payload) + ENTRY_TRUESIZE
        return entry

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
        self.charged += ENTRY_TRUESIZE  # queued whatever the room (__msg_zerocopy_callback)
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


def skb_ends(iov: tuple[int, ...], nbytes: int, frags: int) -> tuple[tuple[int, ...], int]:
    """Where the skbs of a zerocopy send of ``iov`` (its first ``nbytes``) end: offsets at
    which MAX_SKB_FRAGS page frags are full, starting with ``frags`` already in the tail
    skb; and the frags in the last skb after it.  An element takes one frag per page it
    touches (taken page-aligned here: buffer alignment is not known)."""
    ends = []
    off = 0
    for length in iov:
        length = min(length, nbytes - off)
        while length > 0:
            if frags == MAX_SKB_FRAGS:
                ends.append(off)
                frags = 0
            take = min(length, (MAX_SKB_FRAGS - frags) * PAGE_SIZE)
            frags += -(-take // PAGE_SIZE)
            off += take
            length -= take
        if off >= nbytes:
            break
    return tuple(ends), frags


def iov_after(iov: tuple[int, ...], skip: int) -> tuple[int, ...]:
    """The buffer lengths of ``iov`` left after its first ``skip`` bytes were sent."""
    out = []
    for length in iov:
        if skip >= length:
            skip -= length
            continue
        out.append(length - skip)
        skip = 0
    return tuple(out)


class Zerocopy:
    """A socket's MSG_ZEROCOPY bookkeeping: the next id (``sk_zckey``), the ranges whose
    bytes are still queued, oldest first, and the page frags in the last range's last
    skb.  Sequence numbers are TCP's (mod 2**32)."""

    __slots__ = lockfree_read_slots("key", "pending", "tail_frags")

    def __init__(self) -> None:
        self.key = 0
        self.pending: deque[ZcRange] = deque()
        self.tail_frags = 0

    def extends(self, nbytes: int, tail_unsent: bool) -> bool:
        """Would a send of ``nbytes`` whose tail skb is the last range's, still unsent,
        extend that range (``msg_zerocopy_realloc``) rather than take a new uarg?"""
        last = self.pending[-1] if self.pending else None
        return (last is not None and tail_unsent and last.count < ZC_MAX_IDS
                and last.nbytes + nbytes <= ZC_BYTE_LIMIT
                and (last.lo + last.count) & _MASK32 == self.key)

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
        if last is not None and self.extends(nbytes, tail_unsent):
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
        while pending and sub(snd_una, pending[0].end_seq) >= 0:
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


@dataclass(slots=True)
class TsRequest:
    """One skb's timestamp request: its last byte (``tskey``) and the SOF_* flags of the
    write that asked."""

    tskey: int
    flags: int
    #: the payload of the segment that last carried it (what the error queue returns
    #: with each timestamp unless SOF_TIMESTAMPING_OPT_TSONLY)
    payload: bytes = b""


class TxTimestamps:
    """A TCP socket's SO_TIMESTAMPING transmit side: the flags, the OPT_ID key base
    (``sk_tskey``) and the requests whose last byte is not yet acknowledged, in order."""

    __slots__ = lockfree_read_slots("flags", "key_base", "requests")

    def __init__(self) -> None:
        self.flags = 0
        self.key_base = 0
        self.requests: deque[TsRequest] = deque()

    def wrote(self, last_byte: int, tail_unsent: bool) -> None:
        """A write ended at ``last_byte`` (``tcp_tx_timestamp``).  ``tail_unsent``: the bytes
        before it are still unsent, so they share its skb, whose request moves to the new
        last byte ("a single timestamp per packet")."""
        flags = self.flags & (SOF_TX_SCHED | SOF_TX_SOFTWARE | SOF_TX_ACK | SOF_OPT_ID
                              | SOF_OPT_TSONLY)
        if not flags & (SOF_TX_SCHED | SOF_TX_SOFTWARE | SOF_TX_ACK):
            return
        if tail_unsent and self.requests:
            last = self.requests[-1]
            last.tskey, last.flags = last_byte, flags
            return
        self.requests.append(TsRequest(last_byte, flags))

    def transmitted(self, seq: int, end: int, payload: bytes, now: int,
                    errq: ErrorQueue, limit: int | None = None) -> bool:
        """A segment [seq, end) left: SCHED then SND for each request it carries (each
        queued if the error queue is below ``limit``)."""
        done = False
        for req in self.requests:
            off = (req.tskey - seq) & _MASK32
            if off >= (end - seq) & _MASK32:
                continue
            if not req.flags & SOF_OPT_TSONLY:
                req.payload = payload
            for sof, kind in ((SOF_TX_SCHED, SCM_TSTAMP_SCHED),
                              (SOF_TX_SOFTWARE, SCM_TSTAMP_SND)):
                if req.flags & sof and errq.queue(self._entry(req, kind, req.payload, now),
                                                  limit):
                    done = True
        return done

    def acked(self, snd_una: int, now: int, errq: ErrorQueue,
              limit: int | None = None) -> bool:
        """The cumulative ACK reached ``snd_una``: requests below it are done, with an
        ACK timestamp for those that asked (SACKed bytes do not count)."""
        done = False
        requests = self.requests
        while requests and sub(snd_una, requests[0].tskey) > 0:
            req = requests.popleft()
            if req.flags & SOF_TX_ACK and errq.queue(
                    self._entry(req, SCM_TSTAMP_ACK, req.payload, now), limit):
                done = True
        return done

    def _entry(self, req: TsRequest, kind: int, payload: bytes, now: int) -> ErrEntry:
        key = (req.tskey - self.key_base) & _MASK32 if req.flags & SOF_OPT_ID else 0
        return ErrEntry(ExtendedErr(ee_errno=ENOMSG, ee_origin=SO_EE_ORIGIN_TIMESTAMPING,
                                    ee_info=kind, ee_data=key),
                        payload, now)
