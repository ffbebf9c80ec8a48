"""recvmsg's control messages, checked as packetdrill checks them (``run_system_call.c``:
``cmsg_new`` builds the expected buffer from the script's ``msg_control=[...]``,
``cmsg_expect_eq`` compares it with what the call returned).

Each expected entry is ``{cmsg_level=..., cmsg_type=..., cmsg_data=...}``; the data is an
integer (4 bytes), ``{ee_errno=..., ee_origin=..., ee_type=..., ee_code=..., ee_info=...,
ee_data=...}``, a ``struct sock_extended_err`` that ``ip(v6)_recv_error`` follows with the
offender's sockaddr_in (SOL_IP) or sockaddr_in6 (anything else), or ``{scm_sec=...,
scm_nsec=...}``, the first of the three timespecs of a ``struct scm_timestamping``.
Entries are compared in order: level, type, length (CMSG_LEN of the data), then the data
(an extended error field by field; a timestamp within the tolerance of the script time,
a zero one not checked; anything else byte by byte), and the counts must match
("received only N cmsgs" / "received more than N cmsgs").

To add a control message the stack produces (TCP_CM_INQ, SCM_TIMESTAMPING, ...), make
``expected_cmsgs`` build its data and, if packetdrill compares it specially, add the
comparison to ``_data_problem``.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rcunet.core.errqueue import ExtendedErr
from rcunet.drill import script as s
from rcunet.drill.errors import DrillError, DrillUnsupported

#: struct cmsghdr on LP64 (size_t cmsg_len, int level, int type): CMSG_LEN(0)
CMSG_HDR = 16
SOL_IP, IP_RECVERR, SOL_IPV6, IPV6_RECVERR = 0, 11, 41, 25
SOL_SOCKET, SCM_TIMESTAMPING = 1, 37
_EE_FIELDS = ("ee_errno", "ee_origin", "ee_type", "ee_code", "ee_info", "ee_data")
_TIMESPECS = struct.Struct("=qqqqqq")


@dataclass(frozen=True, slots=True)
class Cmsg:
    level: int
    type: int
    data: bytes

    @property
    def cmsg_len(self) -> int:
        return CMSG_HDR + len(self.data)


def expected_cmsgs(control: Any, int_value: Callable[[Any], int]) -> list[Cmsg] | None:
    """The script's ``msg_control`` as packetdrill's cmsg_new lays it out; None when the
    script gives none (then nothing is checked but the count: packetdrill passes a zero
    msg_controllen and reads no control message back)."""
    if control is None or control is s.ELLIPSIS:
        return None
    if not isinstance(control, s.Array):
        raise DrillError(0, "msg_control must be a list of {cmsg_level, cmsg_type, "
                            "cmsg_data}")
    out = []
    for item in control.items:
        if not isinstance(item, s.Struct):
            raise DrillError(0, "a control message is {cmsg_level=..., cmsg_type=..., "
                                "cmsg_data=...}")
        level = int_value(item.field("cmsg_level"))
        kind = int_value(item.field("cmsg_type"))
        out.append(Cmsg(level, kind, _data(level, item.field("cmsg_data"), int_value)))
    return out


def _data(level: int, expr: Any, int_value: Callable[[Any], int]) -> bytes:
    if isinstance(expr, s.Struct) and any(
            isinstance(i, s.Assign) and i.name.startswith("ee_") for i in expr.items):
        values = {}
        for name in _EE_FIELDS:
            value = expr.field(name)
            if value is None:
                raise DrillError(0, f"sock_extended_err needs {name}")
            values[name] = int_value(value) & (0xFF if name in (
                "ee_origin", "ee_type", "ee_code") else 0xFFFFFFFF)
        offender = 16 if level == SOL_IP else 28
        return ExtendedErr(**values).pack() + bytes(offender)
    if isinstance(expr, s.Struct) and expr.field("scm_sec") is not None:
        nsec = expr.field("scm_nsec")
        return _TIMESPECS.pack(int_value(expr.field("scm_sec")),
                               0 if nsec is None else int_value(nsec), 0, 0, 0, 0)
    if isinstance(expr, int | s.Symbol | s.BinOr):
        return struct.pack("i", int_value(expr))
    raise DrillUnsupported(0, f"cmsg_data of this kind ({type(expr).__name__})")


def compare(expected: list[Cmsg] | None, actual: list[Cmsg], live_start_usecs: int = 0,
            tolerance_usecs: int = 0) -> str | None:
    """cmsg_expect_eq: None when equal, else packetdrill's message.  Expected timestamps
    are script times, compared with ``live_start_usecs`` added."""
    want = expected or []
    for i, (e, a) in enumerate(zip(want, actual, strict=False)):
        if a.level != e.level:
            return f"Bad level in cmsg {i}: expected={e.level} actual={a.level}"
        if a.type != e.type:
            return f"Bad type in cmsg {i}: expected={e.type} actual={a.type}"
        if a.cmsg_len != e.cmsg_len:
            return f"Bad len in cmsg {i}: expected={e.cmsg_len} actual={a.cmsg_len}"
        problem = _data_problem(i, e, a, live_start_usecs, tolerance_usecs)
        if problem:
            return problem
    n = min(len(want), len(actual))
    if len(actual) > len(want):
        return f"received more than {n} cmsgs"
    if len(actual) < len(want):
        return f"received only {n} cmsgs"
    return None


def _data_problem(i: int, e: Cmsg, a: Cmsg, start: int, tolerance: int) -> str | None:
    if (a.level, a.type) in ((SOL_IP, IP_RECVERR), (SOL_IPV6, IPV6_RECVERR)):
        want, got = ExtendedErr.unpack(e.data), ExtendedErr.unpack(a.data)
        for name, label in (("ee_errno", "errno"), ("ee_origin", "origin"),
                            ("ee_type", "type"), ("ee_code", "code"), ("ee_info", "info"),
                            ("ee_data", "data")):
            if getattr(got, name) != getattr(want, name):
                return (f"Bad {label} in extended err {i}: expected={getattr(want, name)} "
                        f"actual={getattr(got, name)}")
        return None
    if (a.level, a.type) == (SOL_SOCKET, SCM_TIMESTAMPING):
        return _timestamps_problem(i, e.data, a.data, start, tolerance)
    if a.data != e.data:
        return f"Bad data in cmsg {i}: expected={e.data.hex()} actual={a.data.hex()}"
    return None


def _timestamps_problem(i: int, want: bytes, got: bytes, start: int,
                        tolerance: int) -> str | None:
    """scm_timestamping_expect_eq: each non-zero expected timespec within the tolerance."""
    w, g = _TIMESPECS.unpack(want), _TIMESPECS.unpack(got)
    for k in range(3):
        sec, nsec = w[2 * k], w[2 * k + 1]
        if not sec and not nsec:
            continue
        expected = start + sec * 1_000_000 + nsec // 1000
        actual = g[2 * k] * 1_000_000 + g[2 * k + 1] // 1000
        if abs(expected - actual) > tolerance:
            return (f"Bad timestamp {k} in scm_timestamping {i}: expected={expected} "
                    f"({expected - start}) actual={actual} ({actual - start}) start={start}")
    return None
