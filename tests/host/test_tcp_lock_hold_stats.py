"""The socket lock's owner-section statistics (``TcpSock.lock_stats``, ``TcpLayer.lock_holds``)
are kept only while lock statistics are on: the Host's ``Tuning.lock_stat`` or the global
``rcunet.sync.lockstat`` switch.  Off, a lock section reads no clock and records nothing."""

from __future__ import annotations

import socket
from dataclasses import replace
from typing import Any

from tcp_helpers import connected_pair, recv_exactly, send_all

from rcunet.host.network import Network
from rcunet.sync import lockstat
from rcunet.tuning import Tuning


def _exchange(net: Network, cli: Any, child: Any) -> None:
    payload = bytes(range(256)) * 64
    send_all(net, cli, payload)
    assert recv_exactly(net, child, len(payload)) == payload


def _holds(sock: Any) -> int:
    return int(sock._sk.lock_stats()["holds"])


def test_sections_are_not_timed_while_lock_statistics_are_off() -> None:
    assert not lockstat.enabled()
    net, a, b = Network.two_hosts()
    _srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    _exchange(net, cli, child)
    stats = child._sk.lock_stats()
    assert stats["holds"] == 0 and stats["hold_ns_total"] == 0 and stats["hold_ns_max"] == 0
    assert b.tcp.lock_holds.value() == 0 and b.tcp.lock_hold_ns.value() == 0


def test_tuning_lock_stat_times_every_owner_section() -> None:
    net, a, b = Network.two_hosts(tuning=Tuning(lock_stat=True))
    _srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    before = _holds(child)
    _exchange(net, cli, child)
    stats = child._sk.lock_stats()
    assert stats["holds"] > before
    assert stats["hold_ns_total"] > 0 and stats["hold_ns_max"] > 0
    assert b.tcp.lock_holds.value() >= stats["holds"]
    assert b.tcp.lock_hold_ns.value() >= stats["hold_ns_total"]


def test_switching_statistics_on_and_off_at_run_time() -> None:
    net, a, b = Network.two_hosts()
    _srv, cli, child = connected_pair(net, a, b, socket.AF_INET)
    with lockstat.collecting():  # the global switch (lockstat.enable) times sections too
        _exchange(net, cli, child)
    timed = _holds(child)
    assert timed > 0
    b.set_tuning(replace(b.tuning, lock_stat=True))
    _exchange(net, cli, child)
    assert _holds(child) > timed
    timed = _holds(child)
    b.set_tuning(replace(b.tuning, lock_stat=False))
    _exchange(net, cli, child)
    assert _holds(child) == timed  # off again: nothing more recorded
