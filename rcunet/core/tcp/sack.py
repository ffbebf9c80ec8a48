"""SACK: the receiver's block list (RFC 2018 §4) and the sender's scoreboard (RFC 6675).

Both work in byte offsets relative to the left edge (RCV.NXT, resp. SND.UNA); the
connection converts sequence numbers once, at the boundary, and shifts the origin with
``advance`` when the edge moves.
"""

from __future__ import annotations

#: RFC 6675 §2 DupThresh.
DUP_THRESH = 3


class ReceiverBlocks:
    """Which SACK blocks to report, most recent first (RFC 2018 §4).

    "The first SACK block MUST specify the contiguous block of data containing the segment
    which triggered this ACK"; later blocks repeat the most recently reported ones.
    """

    __slots__ = ("_recent",)

    def __init__(self) -> None:
        self._recent: list[int] = []  # offsets of bytes known to sit in held ranges

    def note(self, offset: int) -> None:
        """A segment landed at ``offset``: its block goes first."""
        self._recent.insert(0, offset)
        del self._recent[8:]

    def advance(self, n: int) -> None:
        if self._recent:  # (no new list per in-order segment)
            self._recent = [o - n for o in self._recent if o - n > 0]

    def blocks(self, held: list[tuple[int, int]], limit: int) -> list[tuple[int, int]]:
        """Up to ``limit`` [start, end) ranges from ``held``, most recently touched first."""
        out: list[tuple[int, int]] = []
        for offset in self._recent:
            for start, end in held:
                if start <= offset < end:
                    if (start, end) not in out:
                        out.append((start, end))
                    break
        for rng in reversed(held):  # then any others, highest first, so all get reported
            if rng not in out:
                out.append(rng)
        return out[:limit]

    def clear(self) -> None:
        self._recent = []


class Scoreboard:
    """The RFC 6675 §3 scoreboard: which bytes above SND.UNA the peer has SACKed.

    Bounded to ``max_ranges`` islands: a hostile receiver SACKing every other byte
    cannot make each ACK cost time proportional to the window (CVE-2019-11478 is the
    Linux instance of that attack); blocks that would exceed the bound are ignored, which
    only makes recovery more conservative.
    """

    __slots__ = ("_sacked", "max_ranges")

    def __init__(self, max_ranges: int = 128) -> None:
        self._sacked: list[tuple[int, int]] = []  # sorted, disjoint [start, end) offsets
        self.max_ranges = max_ranges

    @property
    def sacked_bytes(self) -> int:
        return sum(end - start for start, end in self._sacked)

    @property
    def highest_sacked(self) -> int:
        """End offset of the highest SACKed byte (0 when nothing is SACKed)."""
        return self._sacked[-1][1] if self._sacked else 0

    def ranges(self) -> list[tuple[int, int]]:
        return list(self._sacked)

    def sacked_below(self, limit: int) -> int:
        """Bytes SACKed below offset ``limit``."""
        if not self._sacked:
            return 0  # the common case, asked on every ACK: no generator made
        return sum(max(0, min(end, limit) - start) for start, end in self._sacked)

    def clear(self) -> None:
        self._sacked = []

    def advance(self, n: int) -> None:
        """SND.UNA moved forward by ``n``."""
        if not self._sacked:
            return  # the common case: nothing SACKed, no new list per ACK
        out = []
        for start, end in self._sacked:
            start, end = max(start - n, 0), end - n
            if end > 0 and end > start:
                out.append((start, end))
        self._sacked = out

    def add(self, start: int, end: int) -> int:
        """Record a SACK block, clipped by the caller to sent data; return new bytes SACKed."""
        if end <= start:
            return 0
        before = self.sacked_bytes
        merged: list[tuple[int, int]] = []
        for s, e in sorted(self._sacked + [(start, end)]):
            if merged and s <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], e))
            else:
                merged.append((s, e))
        if len(merged) > self.max_ranges:
            return 0
        self._sacked = merged
        return self.sacked_bytes - before

    def unsacked_in(self, start: int, end: int) -> int:
        """Bytes of [start, end) not SACKed."""
        if end <= start:
            return 0
        covered = sum(max(0, min(e, end) - max(s, start)) for s, e in self._sacked)
        return (end - start) - covered

    def lost_boundary(self, smss: int) -> int:
        """Offset L such that every unSACKed byte below L is lost per IsLost (RFC 6675 §4).

        IsLost(x): DupThresh discontiguous SACKed sequences above x, or more than
        (DupThresh - 1) * SMSS bytes SACKed above x.
        """
        boundary = 0
        if len(self._sacked) >= DUP_THRESH:
            boundary = self._sacked[-DUP_THRESH][0]
        threshold = (DUP_THRESH - 1) * smss
        cum = 0
        for start, end in reversed(self._sacked):
            if cum + (end - start) > threshold:
                # sacked_above(x) = cum + end - x - 1 > threshold  <=>  x < end - 1 - (t - cum)
                boundary = max(boundary, end - 1 - (threshold - cum))
                break
            cum += end - start
        return boundary

    def is_lost(self, offset: int, smss: int) -> bool:
        return offset < self.lost_boundary(smss)

    def pipe(self, high_rxt: int, high_data: int, smss: int) -> int:
        """SetPipe (RFC 6675 §4): bytes believed in the network.

        For each unSACKed byte below HighData: +1 unless it is lost, +1 more if it was
        retransmitted (below HighRxt).
        """
        lost = min(self.lost_boundary(smss), high_data)
        return self.unsacked_in(lost, high_data) + self.unsacked_in(0, min(high_rxt, high_data))

    def next_seg(self, high_rxt: int, smss: int) -> tuple[int, int] | None:
        """NextSeg rule 1 (RFC 6675 §4): first lost, unSACKed, not yet retransmitted bytes.

        Returns (offset, length <= smss) stopping at the next SACKed range, or None.
        """
        return self._first_hole(high_rxt, min(self.lost_boundary(smss), self.highest_sacked), smss)

    def next_seg_rule3(self, high_rxt: int, smss: int) -> tuple[int, int] | None:
        """NextSeg rule 3: an unSACKed hole below the highest SACK, even if not yet lost."""
        return self._first_hole(high_rxt, self.highest_sacked, smss)

    def _first_hole(self, start: int, limit: int, smss: int) -> tuple[int, int] | None:
        cur = start
        for s, e in self._sacked:
            if e <= cur:
                continue
            if s > cur:
                if cur >= limit:
                    return None
                return cur, min(s - cur, smss)
            cur = e
        return None
