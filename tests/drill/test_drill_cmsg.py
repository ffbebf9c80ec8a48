"""recvmsg's control messages in the drill engine (rcunet/drill/cmsg.py): laid out as
packetdrill's cmsg_new lays them out, compared as cmsg_expect_eq compares them, and a
stack whose error queue differs from the script fails with packetdrill's message."""

from __future__ import annotations

import struct

import pytest

from rcunet.drill import cmsg
from rcunet.drill import script as s
from rcunet.drill.parser import parse
from rcunet.drill.runner import run_script

PASSIVE_ZC = """0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 setsockopt(3, SOL_SOCKET, SO_ZEROCOPY, [1], 4) = 0
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 65535 <mss 1000,sackOK,nop,nop,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 7>
+.1 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
+0 send(4, ..., 100, MSG_ZEROCOPY) = 100
+0 > P. 1:101(100) ack 1 <...>
+0 < . 1:1(0) ack 101 win 257
"""


def _errqueue_call(flags: str = "MSG_ERRQUEUE", control: str | None = None,
                   info: int = 0, data: int = 0) -> str:
    if control is None:
        control = ("[{cmsg_level=CMSG_LEVEL_IP, cmsg_type=CMSG_TYPE_RECVERR, "
                   "cmsg_data={ee_errno=0, ee_origin=SO_EE_ORIGIN_ZEROCOPY, ee_type=0, "
                   f"ee_code=SO_EE_CODE_ZEROCOPY_COPIED, ee_info={info}, ee_data={data}}}}}]")
    return (f"+0 recvmsg(4, {{msg_name(...)=..., msg_iov(1)=[{{...,0}}], msg_flags={flags}, "
            f"msg_control={control}}}, MSG_ERRQUEUE) = 0\n")


def _run(text: str, family: int = 4) -> tuple[str, str]:
    result = run_script(parse(text, "t.pkt"), family)
    return result.status, result.message


def _value(expr: object) -> int:
    if isinstance(expr, int):
        return expr
    assert isinstance(expr, s.Symbol)
    return {"SOL_IP": 0, "IP_RECVERR": 11, "SOL_IPV6": 41, "IPV6_RECVERR": 25}[expr.name]


def _ee(level: str, kind: str) -> s.Array:
    fields = tuple(s.Assign(n, None, v) for n, v in (
        ("ee_errno", 0), ("ee_origin", 5), ("ee_type", 0), ("ee_code", 1), ("ee_info", 2),
        ("ee_data", 3)))
    return s.Array((s.Struct((s.Assign("cmsg_level", None, s.Symbol(level)),
                              s.Assign("cmsg_type", None, s.Symbol(kind)),
                              s.Assign("cmsg_data", None, s.Struct(fields)))),))


def test_extended_error_is_followed_by_the_family_sockaddr() -> None:
    [v4] = cmsg.expected_cmsgs(_ee("SOL_IP", "IP_RECVERR"), _value) or []
    [v6] = cmsg.expected_cmsgs(_ee("SOL_IPV6", "IPV6_RECVERR"), _value) or []
    assert (v4.level, v4.type, v4.cmsg_len) == (0, 11, 16 + 16 + 16)
    assert (v6.level, v6.type, v6.cmsg_len) == (41, 25, 16 + 16 + 28)


def test_compare_reports_as_packetdrill() -> None:
    [want] = cmsg.expected_cmsgs(_ee("SOL_IP", "IP_RECVERR"), _value) or []
    assert cmsg.compare([want], [want]) is None
    other = cmsg.Cmsg(0, 11, want.data[:8] + (9).to_bytes(4, "little") + want.data[12:])
    assert cmsg.compare([want], [other]) == "Bad info in extended err 0: expected=2 actual=9"
    assert cmsg.compare([want], []) == "received only 0 cmsgs"
    assert cmsg.compare([], [want]) == "received more than 0 cmsgs"
    assert cmsg.compare([want], [cmsg.Cmsg(41, 11, want.data)]).startswith("Bad level")
    assert cmsg.compare([want], [cmsg.Cmsg(0, 11, want.data + bytes(12))]).startswith(
        "Bad len")


@pytest.mark.parametrize("family", [4, 6])
def test_matching_notification_passes(family: int) -> None:
    status, message = _run(PASSIVE_ZC + _errqueue_call(), family)
    assert status == "pass", message


@pytest.mark.parametrize(("call", "words"), [
    (_errqueue_call(data=1), "Bad data in extended err 0: expected=1 actual=0"),
    (_errqueue_call(flags="0"), "Expected msg_flags 0x00000000 but got 0x00002000"),
    (_errqueue_call(control="[]"), "Expected msg_flags 0x00002000 but got 0x00002008"),
])
def test_a_different_error_queue_fails_with_the_evidence(call: str, words: str) -> None:
    status, message = _run(PASSIVE_ZC + call)
    assert status == "fail"
    assert words in message


def test_the_entry_is_consumed() -> None:
    again = _errqueue_call().replace("= 0\n", "= -1 EAGAIN (Resource temporarily unavailable)\n")
    status, message = _run(PASSIVE_ZC + _errqueue_call() + again)
    assert status == "pass", message


def test_timestamps_are_compared_within_the_tolerance() -> None:
    expr = s.Array((s.Struct((
        s.Assign("cmsg_level", None, 1), s.Assign("cmsg_type", None, 37),
        s.Assign("cmsg_data", None, s.Struct((s.Assign("scm_sec", None, 0),
                                              s.Assign("scm_nsec", None, 20_000_000)))))),))
    [want] = cmsg.expected_cmsgs(expr, _value) or []
    assert want.cmsg_len == 16 + 48
    start = 1_000_000  # usecs of script time 0

    def got(usecs: int) -> cmsg.Cmsg:
        sec, rest = divmod(usecs, 1_000_000)
        return cmsg.Cmsg(1, 37, struct.pack("=qqqqqq", sec, rest * 1000, 0, 0, 0, 0))

    assert cmsg.compare([want], [got(start + 20_000 + 3_000)], start, 4000) is None
    problem = cmsg.compare([want], [got(start + 30_000)], start, 4000)
    assert problem is not None and problem.startswith("Bad timestamp 0 in scm_timestamping 0")
