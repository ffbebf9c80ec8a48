"""SO_TIMESTAMPING's transmit timestamps through the socket API: a write's last byte is
reported from the error queue when it is sent and when it is acknowledged, with the wall
clock time (CLOCK_REALTIME, as Linux's software timestamps) in SCM_TIMESTAMPING."""

from __future__ import annotations

import select
import socket
import struct
import time
from typing import Any

from rcunet.api.socket import MSG_ERRQUEUE

SO_TIMESTAMPING = 37
SOF_TX_SOFTWARE, SOF_SOFTWARE, SOF_OPT_ID, SOF_TX_ACK, SOF_OPT_TSONLY = (
    1 << 1, 1 << 4, 1 << 7, 1 << 9, 1 << 11)
SCM_TSTAMP_SND, SCM_TSTAMP_ACK = 0, 2
EE = struct.Struct("=IBBBBII")


def test_send_and_ack_timestamps_of_the_last_byte(pair: Any) -> None:
    cli, child = pair
    flags = SOF_TX_SOFTWARE | SOF_TX_ACK | SOF_SOFTWARE | SOF_OPT_ID | SOF_OPT_TSONLY
    cli.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, flags)
    assert cli.getsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING) == flags
    before = time.time_ns()
    cli.sendall(b"t" * 1000)
    got = 0
    while got < 1000:
        got += len(child.recv(1000))
    seen = []
    deadline = time.monotonic() + 10
    while SCM_TSTAMP_ACK not in [kind for kind, _key, _at in seen]:
        assert time.monotonic() < deadline, seen
        if not select.select([cli], [], [], 1.0)[0]:
            continue
        data, ancdata, msg_flags, _addr = cli.recvmsg(0, 256, MSG_ERRQUEUE)
        assert data == b"" and msg_flags == MSG_ERRQUEUE  # OPT_TSONLY: no payload
        (lvl1, typ1, stamp), (lvl2, typ2, err) = ancdata
        assert (lvl1, typ1) == (socket.SOL_SOCKET, SO_TIMESTAMPING)
        assert (lvl2, typ2) == (socket.IPPROTO_IP, 11)
        sec, nsec = struct.unpack_from("=qq", stamp)
        ee_errno, origin, _t, _c, _p, kind, key = EE.unpack_from(err)
        assert (ee_errno, origin) == (42, 4)  # ENOMSG, SO_EE_ORIGIN_TIMESTAMPING
        seen.append((kind, key, sec * 1_000_000_000 + nsec))
    assert [(kind, key) for kind, key, _at in seen] == [(SCM_TSTAMP_SND, 999),
                                                       (SCM_TSTAMP_ACK, 999)]
    after = time.time_ns()
    assert all(before - 10**9 <= at <= after + 10**9 for _k, _key, at in seen)
    assert seen[0][2] <= seen[1][2]
