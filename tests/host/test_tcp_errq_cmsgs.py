"""recvmsg(MSG_ERRQUEUE)'s control messages laid out as put_cmsg lays them out: each needs
its header's room, is cut to what is left (MSG_CTRUNC), and takes CMSG_SPACE (8-byte
aligned) of the buffer."""

from __future__ import annotations

from rcunet.host.tcp.errq import _put_cmsgs

TS = (1, 37, bytes(48))  # SCM_TIMESTAMPING: 16 + 48 = 64, CMSG_SPACE 64
EE = (0, 11, bytes(32))  # IP_RECVERR: 16 + 32 = 48


def test_both_fit() -> None:
    assert _put_cmsgs([TS, EE], 64 + 48) == ([TS, EE], False)


def test_second_cut_to_the_room_left() -> None:
    out, cut = _put_cmsgs([TS, EE], 64 + 24)
    assert cut and out == [TS, (0, 11, bytes(8))]


def test_no_room_for_a_header() -> None:
    assert _put_cmsgs([TS, EE], 64 + 8) == ([TS], True)
    assert _put_cmsgs([EE], 0) == ([], True)


def test_alignment_is_charged() -> None:
    odd = (41, 25, bytes(44))  # IPV6_RECVERR: 16 + 44 = 60, CMSG_SPACE 64
    assert _put_cmsgs([odd, EE], 60 + 48) == ([odd, (0, 11, bytes(28))], True)
    assert _put_cmsgs([odd, EE], 64 + 48) == ([odd, EE], False)
