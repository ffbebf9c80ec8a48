"""ICMP echo between the kernel and rcunet, both directions, IPv4 and IPv6, TAP and TUN."""

from __future__ import annotations

import re
import threading

import pytest
from iop_support import Peer, used

PING_COUNT = 3


def _kernel_pings(peer: Peer, version: int) -> None:
    argv = ["ping", f"-{version}", "-c", str(PING_COUNT), "-i", "0.2", "-W", "2", "-s", "100",
            peer.rcunet[version]]
    result = peer.run(argv, timeout=20, check=False)
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    assert re.search(rf"{PING_COUNT} packets transmitted, {PING_COUNT} received", out), out
    used("ping")


def _rcunet_pings(peer: Peer, version: int) -> None:
    replies: dict[int, bytes] = {}
    done = threading.Event()
    ident = 0x7777

    def listener(family: int, src: bytes, msg: object) -> None:
        if getattr(msg, "ident", None) == ident:
            replies[msg.seq] = bytes(msg.data)  # type: ignore[attr-defined]
            if len(replies) == PING_COUNT:
                done.set()

    peer.host.ip.icmp.echo_listeners.append(listener)
    import ipaddress

    dst = ipaddress.ip_address(peer.kernel[version]).packed
    payloads = {seq: bytes([seq]) * (56 + seq) for seq in range(1, PING_COUNT + 1)}
    for seq, data in payloads.items():
        # the first request may wait for ARP/ND; keep sending until the kernel answers
        assert peer.host.ip.icmp.ping(dst, ident, seq, data) == 0
    for _ in range(20):
        if done.wait(0.25):
            break
        for seq, data in payloads.items():
            if seq not in replies:
                peer.host.ip.icmp.ping(dst, ident, seq, data)
    assert replies == payloads  # the kernel echoed every payload unchanged


@pytest.mark.parametrize("version", [4, 6])
def test_kernel_pings_rcunet_over_tap(peer: Peer, version: int) -> None:
    _kernel_pings(peer, version)
    key = "IcmpInEchos" if version == 4 else "Icmp6InEchos"
    assert peer.counters().get(key, 0) >= PING_COUNT


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_pings_kernel_over_tap(peer: Peer, version: int) -> None:
    _rcunet_pings(peer, version)
    used("kernel ICMP echo")


@pytest.mark.parametrize("version", [4, 6])
def test_kernel_pings_rcunet_over_tun(tun_peer: Peer, version: int) -> None:
    _kernel_pings(tun_peer, version)


@pytest.mark.parametrize("version", [4, 6])
def test_rcunet_pings_kernel_over_tun(tun_peer: Peer, version: int) -> None:
    _rcunet_pings(tun_peer, version)


def test_kernel_neighbour_entry_has_rcunet_mac(peer: Peer) -> None:
    """ARP and ND are live: after traffic the kernel has learnt rcunet's MAC."""
    _kernel_pings(peer, 4)
    _kernel_pings(peer, 6)
    out = peer.run(["ip", "neigh", "show", "dev", peer.ifname]).stdout.decode()
    mac = ":".join(f"{b:02x}" for b in peer.iface.mac or b"")
    for version in (4, 6):
        assert re.search(rf"^{re.escape(peer.rcunet[version])} lladdr {mac}", out, re.M), out
    used("ip neigh")
