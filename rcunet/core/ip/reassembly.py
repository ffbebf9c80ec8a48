"""IP reassembly for IPv4 (RFC 791 §3.2) and IPv6 (RFC 8200 §4.5), with bounded memory.

``Ipv4Reassembler`` / ``Ipv6Reassembler`` are sans-IO: ``add(fragment, now)`` returns the
reassembled datagram when the fragment completes one (else ``None``; for IPv6 it may
return a ``ParameterProblem`` for the caller to answer), ``expire(now)`` returns the
``TimeExceeded`` events of timed-out datagrams whose first fragment had arrived (answer
with ICMP time exceeded, code 1), and ``next_deadline()`` says when to call ``expire``.

Rules, and where they come from:

* Keys: IPv4 (src, dst, protocol, ident) as RFC 791 says; IPv6 (src, dst, ident) as
  RFC 8200 says (the Next Header of non-first fragments may differ and is ignored).
  Both add the caller's ``scope`` (an interface index for link-local traffic, as Linux
  keys IPv6 link-local queues by interface).
* Timeout: ``timeout`` ns (``ipfrag_time``, 30 s) from a queue's *first* fragment, as
  Linux arms its timer once at queue creation; then ReasmTimeout and ReasmFails count.
* Memory: every fragment is charged its data plus ``FRAGMENT_OVERHEAD`` (the kernel's
  skb truesize overhead), every queue ``QUEUE_OVERHEAD``.  When a fragment would take the
  total past ``high_thresh`` (``ipfrag_high_thresh``) the oldest queues are evicted (the
  classic ``inet_frag_evictor``, counted in ReasmFails and ReasmEvictions); if the
  fragment's own queue still does not fit, that queue is dropped too.  So a flood of
  never-completing fragments costs at most ``high_thresh`` bytes.
* Overlaps: IPv6 follows RFC 5722 (with errata 3089): a fragment that overlaps data
  already held discards the whole datagram, except an exact duplicate (same offset,
  length and bytes), which is dropped alone.  IPv4 follows Linux
  (``inet_frag_queue_insert``): a fragment wholly inside data already held is a
  duplicate and is dropped alone; any other overlap discards the datagram.  We differ
  from Linux in one safe way: a "duplicate" whose bytes differ from what we hold is
  treated as an overlap, so reassembly never has to pick between two versions of a
  byte.  Overlaps count ReasmOverlaps and ReasmFails; duplicates ReasmDuplicates.
* Inconsistent fragments discard the datagram (ReasmFails), as Linux's ``discard_qp``
  does: an empty fragment, a non-last fragment whose length is not a multiple of 8,
  two different last fragments, data beyond the end a last fragment declared, or a
  datagram longer than 65535 bytes.  For IPv6 the first two of these with
  RFC 8200's ICMP answer come back as ``ParameterProblem``.
* Counters (``counters``) use Linux's names: ReasmReqds (fragments received), ReasmOKs,
  ReasmFails, ReasmTimeout, ReasmOverlaps; plus rcunet's ReasmDuplicates and
  ReasmEvictions.

Not thread-safe: the Host serialises calls (one reassembler per receive worker, or a
lock around a shared one).
"""

from __future__ import annotations

import bisect
import dataclasses
from typing import Any, Generic, TypeVar

from rcunet.wire import ipv4, ipv6
from rcunet.wire.errors import WireError

SECOND = 1_000_000_000
#: ``ipfrag_time``: 30 s.
DEFAULT_TIMEOUT = 30 * SECOND
#: ``ipfrag_high_thresh``: 4 MiB.
DEFAULT_HIGH_THRESH = 4 * 1024 * 1024
#: Bytes charged per fragment beyond its data (Linux charges skb->truesize).
FRAGMENT_OVERHEAD = 256
#: Bytes charged per reassembly queue.
QUEUE_OVERHEAD = 256
MAX_DATAGRAM = 0xFFFF

#: ICMPv6 Parameter Problem pointers (RFC 8200 §4.5).
POINTER_PAYLOAD_LENGTH = 4

COUNTER_NAMES = (
    "ReasmReqds", "ReasmOKs", "ReasmFails", "ReasmTimeout", "ReasmOverlaps",
    "ReasmDuplicates", "ReasmEvictions",
)

P = TypeVar("P", ipv4.Repr, ipv6.Repr)


@dataclasses.dataclass(frozen=True, slots=True)
class TimeExceeded:
    """Reassembly of the datagram whose first fragment is ``first`` timed out: send
    ICMP time exceeded, code 1 (fragment reassembly time exceeded), quoting it."""

    first: Any  # ipv4.Repr | ipv6.Repr


@dataclasses.dataclass(frozen=True, slots=True)
class ParameterProblem:
    """An IPv6 fragment RFC 8200 §4.5 says to answer with ICMPv6 Parameter Problem,
    code 0, ``pointer`` bytes into ``packet`` (the fragment, which is dropped)."""

    packet: ipv6.Repr
    pointer: int


class _Queue:
    """The fragments of one datagram, sorted by offset, never overlapping."""

    __slots__ = ("key", "starts", "pieces", "first", "max_end", "last_seen", "received",
                 "truesize", "expires_at")

    def __init__(self, key: tuple[Any, ...], expires_at: int) -> None:
        self.key = key
        self.starts: list[int] = []  # offsets of pieces, for bisect
        self.pieces: list[tuple[int, int, bytes]] = []  # (offset, end, data)
        self.first: Any = None  # the offset-0 fragment (its header is the datagram's)
        self.max_end = 0
        self.last_seen = False
        self.received = 0
        self.truesize = QUEUE_OVERHEAD
        self.expires_at = expires_at

    @property
    def complete(self) -> bool:
        return self.last_seen and self.received == self.max_end

    def data(self) -> bytes:
        return b"".join(piece[2] for piece in self.pieces)


_DUPLICATE = "duplicate"
_OVERLAP = "overlap"


class _Reassembler(Generic[P]):
    """The family-independent part; subclasses say how to read a fragment."""

    #: IPv4 accepts a fragment wholly inside held data as a duplicate (Linux); IPv6
    #: only an exact duplicate (RFC 5722).
    contained_is_duplicate = False

    def __init__(self, high_thresh: int = DEFAULT_HIGH_THRESH, timeout: int = DEFAULT_TIMEOUT):
        self.high_thresh = high_thresh
        self.timeout = timeout
        self._queues: dict[tuple[Any, ...], _Queue] = {}  # insertion order = expiry order
        self._mem = 0
        self._pending: list[TimeExceeded] = []
        self.counters: dict[str, int] = dict.fromkeys(COUNTER_NAMES, 0)

    # -- public -------------------------------------------------------------------------

    @property
    def mem(self) -> int:
        """Bytes charged to queued fragments now (never above ``high_thresh``)."""
        return self._mem

    def __len__(self) -> int:
        """Datagrams being reassembled."""
        return len(self._queues)

    def next_deadline(self) -> int | None:
        if self._pending:
            return 0
        for queue in self._queues.values():
            return queue.expires_at
        return None

    def expire(self, now: int) -> list[TimeExceeded]:
        """Drop timed-out datagrams; returns the ICMP time-exceeded events to send."""
        events, self._pending = self._pending, []
        queues = self._queues
        while queues:
            queue = next(iter(queues.values()))
            if queue.expires_at > now:
                break
            self._kill(queue)
            self.counters["ReasmTimeout"] += 1
            if queue.first is not None:
                events.append(TimeExceeded(queue.first))
        return events

    def add(self, packet: P, now: int, scope: int = 0) -> Any:
        """Take one fragment.  Returns the reassembled datagram (a ``Repr`` with the first
        fragment's header, no longer a fragment) when this one completes it, else
        ``None`` — or, for IPv6, a ``ParameterProblem`` to answer.  A packet that is not
        a fragment comes back unchanged."""
        info = self._fragment_info(packet)
        if info is None:
            return packet
        ident_key: tuple[Any, ...]
        offset, more, data, ident_key = info
        self.counters["ReasmReqds"] += 1
        end = offset + len(data)
        problem = self._check_fragment(packet, offset, end, more)
        if problem is not None:
            return problem  # the caller counts it (Ip6InHdrErrors) and answers
        if offset == 0 and not more:
            return self._atomic(packet, data)
        key = (*ident_key, scope)
        queue = self._queues.get(key)
        if queue is not None and queue.expires_at <= now:
            # Its timer is due: time it out first, keeping the event for expire().
            events = self.expire(now)  # (it swaps self._pending: read it afterwards)
            self._pending.extend(events)
            queue = None
        if queue is None:
            queue = _Queue(key, now + self.timeout)
            self._queues[key] = queue
            self._mem += queue.truesize
        if not self._fits(queue, offset, end, more) or end > self._max_payload(packet):
            self._fail(queue)
            return None
        stored = bytes(data)  # copy: the receive buffer is reused after we return
        verdict = self._insert(queue, offset, end, stored)
        if verdict is _DUPLICATE:
            self.counters["ReasmDuplicates"] += 1
            return None
        if verdict is _OVERLAP:
            self.counters["ReasmOverlaps"] += 1
            self._fail(queue)
            return None
        charge = len(data) + FRAGMENT_OVERHEAD
        queue.truesize += charge
        self._mem += charge
        if offset == 0:
            queue.first = packet._replace(payload=stored)  # shares the held bytes
        if not more:
            queue.last_seen = True
        queue.max_end = max(queue.max_end, end)
        queue.received += len(data)
        if self._mem > self.high_thresh and not self._make_room(queue):
            self._fail(queue)
            return None
        if not queue.complete:
            return None
        self._remove(queue)
        try:
            datagram = self._assemble(queue.first, queue.data())
        except WireError:
            datagram = None
        if datagram is None:
            self.counters["ReasmFails"] += 1
            return None
        self.counters["ReasmOKs"] += 1
        return datagram

    # -- family hooks -------------------------------------------------------------------

    def _fragment_info(self, packet: P) -> tuple[int, bool, memoryview, tuple[Any, ...]] | None:
        raise NotImplementedError

    def _check_fragment(self, packet: P, offset: int, end: int, more: bool) -> Any:
        """An answer-worthy problem with the fragment alone (IPv6), else ``None``."""
        return None

    def _max_payload(self, packet: P) -> int:
        raise NotImplementedError

    def _assemble(self, first: P, data: bytes) -> P | None:
        raise NotImplementedError

    def _atomic(self, packet: P, data: memoryview) -> P | None:
        raise NotImplementedError

    # -- queue mechanics ----------------------------------------------------------------

    @staticmethod
    def _fits(queue: _Queue, offset: int, end: int, more: bool) -> bool:
        """Linux ``ip_frag_queue``'s consistency checks on the datagram's end."""
        if end == offset:
            return False  # empty fragment
        if more:
            if end & 7:
                return False
            return not (queue.last_seen and end > queue.max_end)
        # the last fragment: it must not end before data already held, nor disagree
        # with a last fragment seen before
        if end < queue.max_end:
            return False
        return not (queue.last_seen and end != queue.max_end)

    def _insert(self, queue: _Queue, offset: int, end: int, data: bytes) -> str | None:
        starts, pieces = queue.starts, queue.pieces
        index = bisect.bisect_right(starts, offset)
        before = pieces[index - 1] if index else None
        after = pieces[index] if index < len(pieces) else None
        overlaps = (before is not None and before[1] > offset) or (
            after is not None and after[0] < end
        )
        if not overlaps:
            starts.insert(index, offset)
            pieces.insert(index, (offset, end, data))
            return None
        if self._is_duplicate(queue, index, offset, end, data):
            return _DUPLICATE
        return _OVERLAP

    def _is_duplicate(
        self, queue: _Queue, index: int, offset: int, end: int, data: bytes
    ) -> bool:
        """Is [offset, end) already held, with the same bytes?"""
        pieces = queue.pieces
        if not self.contained_is_duplicate:
            held = pieces[index - 1] if index else None
            return held is not None and held[0] == offset and held[1] == end and held[2] == data
        # The run of contiguous pieces starting at or before `offset` must cover it.
        at = index - 1 if index and pieces[index - 1][1] > offset else index
        cursor = offset
        while cursor < end:
            if at >= len(pieces):
                return False
            p_start, p_end, p_data = pieces[at]
            if p_start > cursor:
                return False  # a hole
            stop = min(p_end, end)
            if p_data[cursor - p_start : stop - p_start] != data[cursor - offset : stop - offset]:
                return False
            cursor = stop
            at += 1
        return True

    def _make_room(self, keep: _Queue) -> bool:
        """Evict the oldest queues other than ``keep`` until under ``high_thresh``."""
        for queue in list(self._queues.values()):
            if self._mem <= self.high_thresh:
                break
            if queue is keep:
                continue
            self.counters["ReasmEvictions"] += 1
            self._fail(queue)
        return self._mem <= self.high_thresh

    def _remove(self, queue: _Queue) -> None:
        del self._queues[queue.key]
        self._mem -= queue.truesize

    def _kill(self, queue: _Queue) -> None:
        self._remove(queue)
        self.counters["ReasmFails"] += 1

    def _fail(self, queue: _Queue) -> None:
        if self._queues.get(queue.key) is queue:
            self._kill(queue)
        else:
            self.counters["ReasmFails"] += 1


class Ipv4Reassembler(_Reassembler[ipv4.Repr]):
    """IPv4 reassembly; see the module docstring for the rules."""

    contained_is_duplicate = True

    def _fragment_info(
        self, packet: ipv4.Repr
    ) -> tuple[int, bool, memoryview, tuple[Any, ...]] | None:
        if not (packet.more_fragments or packet.frag_offset):
            return None
        key = (packet.src, packet.dst, packet.protocol, packet.ident)
        return packet.frag_offset, packet.more_fragments, memoryview(packet.payload), key

    def _max_payload(self, packet: ipv4.Repr) -> int:
        return MAX_DATAGRAM - ipv4.HEADER_LEN

    def _assemble(self, first: ipv4.Repr, data: bytes) -> ipv4.Repr | None:
        if first.header_len() + len(data) > MAX_DATAGRAM:
            return None
        return first._replace(payload=data, more_fragments=False, frag_offset=0)


class Ipv6Reassembler(_Reassembler[ipv6.Repr]):
    """IPv6 reassembly; see the module docstring for the rules."""

    def _fragment_info(
        self, packet: ipv6.Repr
    ) -> tuple[int, bool, memoryview, tuple[Any, ...]] | None:
        frag = packet.fragment
        if frag is None:
            return None
        key = (packet.src, packet.dst, frag.ident)
        return frag.offset, frag.more, memoryview(packet.payload), key

    def _check_fragment(
        self, packet: ipv6.Repr, offset: int, end: int, more: bool
    ) -> ParameterProblem | None:
        # RFC 8200 §4.5: a non-last fragment whose length is not a multiple of 8 ->
        # pointer to Payload Length; a fragment reaching past 65535 -> pointer to the
        # Fragment Offset field.
        if more and (end - offset) & 7:
            return ParameterProblem(packet, POINTER_PAYLOAD_LENGTH)
        if end > MAX_DATAGRAM:
            return ParameterProblem(packet, self._offset_field_pointer(packet))
        return None

    @staticmethod
    def _offset_field_pointer(packet: ipv6.Repr) -> int:
        return ipv6.HEADER_LEN + ipv6.chain_len(packet.extensions[:-1]) + 2

    def _max_payload(self, packet: ipv6.Repr) -> int:
        return MAX_DATAGRAM

    def _assemble(self, first: ipv6.Repr, data: bytes) -> ipv6.Repr | None:
        unfragmentable = first.extensions[:-1]
        if ipv6.chain_len(unfragmentable) + len(data) > MAX_DATAGRAM:
            return None
        return _without_fragment_header(first, unfragmentable, data)

    def _atomic(self, packet: ipv6.Repr, data: memoryview) -> ipv6.Repr | None:
        """RFC 6946: an atomic fragment (offset 0, M clear) is processed at once, never
        mixed with a reassembly queue."""
        self.counters["ReasmOKs"] += 1
        try:
            return _without_fragment_header(packet, packet.extensions[:-1], bytes(data))
        except WireError:
            self.counters["ReasmOKs"] -= 1
            self.counters["ReasmFails"] += 1
            return None


def _without_fragment_header(
    first: ipv6.Repr, unfragmentable: tuple[ipv6.Extension, ...], data: bytes
) -> ipv6.Repr:
    """The datagram: the first fragment's unfragmentable part, then the reassembled
    fragmentable part decoded (it may start with more extension headers)."""
    frag = first.fragment
    assert frag is not None
    next_header = frag.next_header
    if next_header not in ipv6.EXTENSION_PROTOCOLS:
        return first._replace(next_header=next_header, payload=data, extensions=unfragmentable)
    more, upper, start = ipv6.parse_extensions(next_header, data, 0, len(data), first=False)
    if any(isinstance(ext, ipv6.Fragment) for ext in more):
        raise WireError("bad-chain", "a Fragment header inside a reassembled datagram")
    return first._replace(
        next_header=upper,
        payload=memoryview(data)[start:],
        extensions=unfragmentable + more,
    )
