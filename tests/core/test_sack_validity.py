"""SACK blocks a sender believes (tcp_check_dsack, tcp_is_sackblock_valid and the first
pass of tcp_sacktag_write_queue): bad blocks are discarded and counted, never raised."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.core.tcp import sack_validity as sv

UNA, NXT = 10_000, 20_000
BASE = dict(snd_una=UNA, snd_nxt=NXT, undo_marker=0, max_window=65535)


def test_dsack_recognition() -> None:
    assert sv.dsack_kind(((9000, 10000),), ack=UNA) == "TcpExtTCPDSACKRecv"
    assert sv.dsack_kind(((12000, 13000), (11000, 14000)), ack=UNA) == \
        "TcpExtTCPDSACKOfoRecv"
    assert sv.dsack_kind(((12000, 13000), (13000, 14000)), ack=UNA) is None
    assert sv.dsack_kind(((12000, 13000),), ack=UNA) is None
    assert sv.dsack_kind((), ack=UNA) is None


def test_block_validity() -> None:
    assert sv.block_valid(11000, 12000, is_dsack=False, **BASE)
    assert not sv.block_valid(11000, 21000, is_dsack=False, **BASE)   # beyond SND.NXT
    assert not sv.block_valid(12000, 11000, is_dsack=False, **BASE)   # reversed
    assert not sv.block_valid(9000, 10000, is_dsack=False, **BASE)    # below SND.UNA
    assert not sv.block_valid(UNA, 11000, is_dsack=False, **BASE)     # starts at SND.UNA
    # a DSACK below SND.UNA counts only within this recovery's retransmissions
    assert not sv.block_valid(9000, 10000, is_dsack=True, **BASE)     # no undo_marker
    recovery = dict(BASE, undo_marker=8000)
    assert sv.block_valid(9000, 10000, is_dsack=True, **recovery)
    assert not sv.block_valid(9000, 10500, is_dsack=True, **recovery)  # not wholly below
    assert not sv.block_valid(7000, 8000, is_dsack=True, **recovery)   # too old
    assert sv.block_valid(7500, 8500, is_dsack=True, **recovery)       # crosses it
    assert not sv.block_valid(100, 8500, is_dsack=True, **dict(recovery, max_window=1000))


def test_sorting_counts_what_it_discards() -> None:
    got = sv.sort_blocks(((9000, 10000), (12000, 13000), (15000, 30000)), ack=UNA,
                         prior_snd_una=UNA, **BASE)
    assert got == ((((12000, 13000),)), "TcpExtTCPDSACKRecv",
                   ("TcpExtTCPDSACKIgnoredNoUndo", "TcpExtTCPSACKDiscard"))
    in_recovery = sv.sort_blocks(((9500, 10000), (12000, 13000)), ack=UNA,
                                 prior_snd_una=9000, **dict(BASE, undo_marker=8000))
    assert in_recovery.used == ((9500, 10000), (12000, 13000))
    assert in_recovery.discarded == ()
    # a reordered (older) ACK's stale block is dropped without counting
    stale = sv.sort_blocks(((12000, 13000), (5000, 6000)), ack=UNA - 1000,
                           prior_snd_una=UNA, **BASE)
    assert stale.used == ((12000, 13000),) and stale.discarded == ()
    dubious = sv.sort_blocks(((9000, 10000),), ack=UNA, prior_snd_una=UNA,
                             dsack_accepted=False, **BASE)
    assert dubious == ((), None, ("TcpExtTCPSACKDiscard",))


blocks = st.lists(st.tuples(st.integers(0, 0xFFFFFFFF), st.integers(0, 0xFFFFFFFF)),
                  max_size=4).map(tuple)


@settings(max_examples=500, deadline=None)
@given(b=blocks, una=st.integers(0, 0xFFFFFFFF), span=st.integers(0, 1 << 20),
       marker=st.integers(0, 0xFFFFFFFF))
def test_used_blocks_always_lie_inside_the_window(b: tuple[tuple[int, int], ...], una: int,
                                                  span: int, marker: int) -> None:
    """Whatever arrives, a believed non-DSACK block lies within (SND.UNA, SND.NXT], and
    every block is either used, discarded (counted) or silently stale."""
    nxt = (una + span) & 0xFFFFFFFF
    got = sv.sort_blocks(b, ack=una, snd_una=una, snd_nxt=nxt, prior_snd_una=una,
                         undo_marker=marker, max_window=65535)
    assert len(got.used) + len(got.discarded) <= len(b)
    for index, (start, end) in enumerate(got.used):
        if index == 0 and got.dsack:
            continue
        assert (start - una) & 0xFFFFFFFF <= span and (end - una) & 0xFFFFFFFF <= span
