"""Which SACK blocks a sender believes, as Linux's tcp_sacktag_write_queue sorts them
(net/ipv4/tcp_input.c: tcp_check_dsack, tcp_is_sackblock_valid): a DSACK is recognised,
blocks beyond SND.NXT, reversed, below SND.UNA (except a DSACK of data retransmitted in
this recovery) are discarded and counted under Linux's names, never raised.  DSACK floods
are judged by ``rack.dsack_seen``.  Pure; sequence numbers 32-bit.
"""

from __future__ import annotations

from typing import NamedTuple

from rcunet.wire.seqnum import ge, gt, le, lt

MASK32 = 0xFFFFFFFF


def dsack_kind(blocks: tuple[tuple[int, int], ...], ack: int) -> str | None:
    """tcp_check_dsack's recognition (RFC 2883 §4): the first block below the ACK is a
    DSACK of old data ("TcpExtTCPDSACKRecv"), or one inside the second block a DSACK of
    out-of-order data ("TcpExtTCPDSACKOfoRecv"); None otherwise."""
    if not blocks:
        return None
    start0, end0 = blocks[0]
    if lt(start0, ack):
        return "TcpExtTCPDSACKRecv"
    if len(blocks) > 1:
        start1, end1 = blocks[1]
        if not (gt(end0, end1) or lt(start0, start1)):
            return "TcpExtTCPDSACKOfoRecv"
    return None


def block_valid(start: int, end: int, *, is_dsack: bool, snd_una: int, snd_nxt: int,
                undo_marker: int, max_window: int) -> bool:
    """tcp_is_sackblock_valid: inside [SND.UNA, SND.NXT] and not reversed; a DSACK may
    also lie below SND.UNA, within what this recovery retransmitted (from undo_marker,
    or across it by at most a window)."""
    if gt(end, snd_nxt) or not lt(start, end):
        return False  # too far in the future, or reversed
    if not lt(start, snd_nxt):
        return False  # wrapped start
    if gt(start, snd_una):
        return True
    if not is_dsack or not undo_marker:
        return False
    if gt(end, snd_una):
        return False  # a DSACK must lie below SND.UNA completely
    if ge(start, undo_marker):
        return True
    if le(end, undo_marker):
        return False  # too old
    return ge(start, (end - max_window) & MASK32)


class SackBlocks(NamedTuple):
    """The blocks of one ACK a sender uses, and why the others were set aside."""

    #: Believed blocks, in the order received; the first is the DSACK when ``dsack``.
    used: tuple[tuple[int, int], ...]
    #: The first block is a DSACK (its counter name), or None.
    dsack: str | None
    #: Counter names of the blocks discarded (Linux MIB names).
    discarded: tuple[str, ...]


def sort_blocks(blocks: tuple[tuple[int, int], ...], *, ack: int, snd_una: int,
                snd_nxt: int, prior_snd_una: int, undo_marker: int, max_window: int,
                dsack_accepted: bool = True) -> SackBlocks:
    """tcp_sacktag_write_queue's first pass over an ACK's blocks.  ``dsack_accepted``:
    ``rack.dsack_seen`` took the first block's duplicates (a dubious DSACK is then an
    ordinary block, as tcp_check_dsack returns false for it)."""
    dsack = dsack_kind(blocks, ack) if dsack_accepted else None
    used: list[tuple[int, int]] = []
    discarded: list[str] = []
    for index, (start, end) in enumerate(blocks):
        is_dsack = index == 0 and dsack is not None
        if not block_valid(start, end, is_dsack=is_dsack, snd_una=snd_una, snd_nxt=snd_nxt,
                           undo_marker=undo_marker, max_window=max_window):
            if is_dsack:
                discarded.append("TcpExtTCPDSACKIgnoredOld" if undo_marker
                                 else "TcpExtTCPDSACKIgnoredNoUndo")
            elif ack == snd_una or gt(end, snd_una):
                # (an old block on a reordered ACK is not counted)
                discarded.append("TcpExtTCPSACKDiscard")
            continue
        if not gt(end, prior_snd_una):
            continue  # very old: nothing left to tag (a DSACK's undo counting is done)
        used.append((start, end))
    return SackBlocks(tuple(used), dsack, tuple(discarded))
