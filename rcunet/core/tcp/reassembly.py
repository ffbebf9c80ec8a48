"""Out-of-order receive queue: byte ranges beyond RCV.NXT, bounded in ranges.

Offsets are relative to RCV.NXT (offset 0 is the next byte the application needs), so no
wrap-around arithmetic happens here; the connection shifts the origin with ``advance``
when in-order data arrives.  Bytes are bounded by the caller, which only stores data
inside the advertised window; ranges are bounded here (``max_ranges``), because a hostile
peer can fragment the window into one-byte islands.

Overlaps keep the bytes that arrived first (Linux does the same in ``tcp_data_queue_ofo``):
a contradictory retransmission never changes data already queued, so the application
sees one consistent version of every byte.
"""

from __future__ import annotations

Buffer = bytes | bytearray | memoryview


class Assembler:
    __slots__ = ("_ranges", "max_ranges", "buffered")

    def __init__(self, max_ranges: int = 256) -> None:
        self._ranges: list[tuple[int, bytes]] = []  # sorted, disjoint, never adjacent
        self.max_ranges = max_ranges
        self.buffered = 0  #: bytes held

    def __len__(self) -> int:
        return len(self._ranges)

    def ranges(self) -> list[tuple[int, int]]:
        """Held ranges as [start, end) offsets, ascending."""
        return [(start, start + len(data)) for start, data in self._ranges]

    def end(self) -> int:
        """The offset just past the highest byte held (0: nothing held): the last
        range's end, since ranges are sorted and disjoint."""
        if not self._ranges:
            return 0
        start, data = self._ranges[-1]
        return start + len(data)

    def add(self, offset: int, data: Buffer) -> int | None:
        """Store ``data`` at ``offset`` (> 0); return the number of new bytes kept.

        Returns None, storing nothing, when the segment would need more than
        ``max_ranges`` ranges (the caller counts the drop).
        """
        if offset < 0:
            raise ValueError("offset must be >= 0")
        end = offset + len(data)
        pieces: list[tuple[int, bytes]] = []
        cur = offset
        for start, held in self._ranges:
            held_end = start + len(held)
            if held_end <= cur:
                continue
            if start >= end:
                break
            if start > cur:
                pieces.append((cur, bytes(data[cur - offset : start - offset])))
            cur = max(cur, held_end)
            if cur >= end:
                break
        if cur < end:
            pieces.append((cur, bytes(data[cur - offset :])))
        if not pieces:
            return 0
        merged = _coalesce(sorted(self._ranges + pieces))
        if len(merged) > self.max_ranges:
            return None
        self._ranges = merged
        added = sum(len(p) for _, p in pieces)
        self.buffered += added
        return added

    def advance(self, n: int) -> None:
        """RCV.NXT moved forward by ``n``: shift offsets, discarding bytes now behind it."""
        if not self._ranges:
            return  # the in-order case: nothing held, no new list per segment
        shifted: list[tuple[int, bytes]] = []
        for start, data in self._ranges:
            start -= n
            if start < 0:
                if start + len(data) <= 0:
                    self.buffered -= len(data)
                    continue
                self.buffered += start  # bytes cut off the front
                data = data[-start:]
                start = 0
            shifted.append((start, data))
        self._ranges = shifted

    def pop_front(self) -> bytes | None:
        """Remove and return the range at offset 0, if the hole before it is filled."""
        if self._ranges and self._ranges[0][0] == 0:
            _, data = self._ranges.pop(0)
            self.buffered -= len(data)
            return data
        return None

    def clear(self) -> None:
        self._ranges = []
        self.buffered = 0


def _coalesce(ranges: list[tuple[int, bytes]]) -> list[tuple[int, bytes]]:
    out: list[tuple[int, bytes]] = []
    for start, data in ranges:
        if out and out[-1][0] + len(out[-1][1]) == start:
            out[-1] = (out[-1][0], out[-1][1] + data)
        else:
            out.append((start, data))
    return out
