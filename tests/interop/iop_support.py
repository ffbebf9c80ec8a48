"""Shared helpers of the interop tests (see conftest.py for the fixtures)."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

import pytest

from rcunet.host.host import Host
from rcunet.host.interface import Interface
from rcunet.link.netns import Namespace
from rcunet.link.pcap import PcapWriter
from rcunet.link.tap import TapDevice

NS_PREFIX = "rcunet-iop"
KERNEL = {4: "10.77.0.1", 6: "fd77::1"}
RCUNET = {4: "10.77.0.2", 6: "fd77::2"}
TUN_KERNEL = {4: "10.77.1.1", 6: "fd77:1::1"}
TUN_RCUNET = {4: "10.77.1.2", 6: "fd77:1::2"}
PACKAGES = {"ip": "iproute2", "ping": "iputils-ping", "socat": "socat",
            "nc": "netcat-openbsd", "curl": "curl", "ab": "apache2-utils", "wrk": "wrk",
            "nginx": "nginx-light", "tshark": "tshark", "capsh": "libcap2-bin"}

TXQLEN = 10000
_serial = itertools.count(1)
_tools_lock = threading.Lock()
TOOLS_USED: dict[str, int] = {}  # guarded-by: _tools_lock


def used(tool: str) -> None:
    """Record that a real tool (or kernel facility) took part in a passing check."""
    with _tools_lock:
        TOOLS_USED[tool] = TOOLS_USED.get(tool, 0) + 1


def need_tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (Debian package {PACKAGES.get(name, name)}; "
                    "scripts/test installs it when run as root)", pytrace=False)
    return path


@dataclass
class Peer:
    """One kernel namespace and one rcunet Host joined by a TAP or TUN device."""

    ns: Namespace
    host: Host
    device: TapDevice
    iface: Interface
    ifname: str
    kernel: dict[int, str]
    rcunet: dict[int, str]
    pcap_path: str | None = None
    extra: list[object] = field(default_factory=list)

    def run(self, argv: list[str], timeout: float = 30.0, check: bool = True,
            input: bytes | None = None):  # type: ignore[no-untyped-def]
        need_tool(argv[0])
        return self.ns.run(argv, timeout=timeout, check=check, input=input)

    def counters(self) -> dict[str, int]:
        return self.host.counters.snapshot()


def unique_names() -> tuple[str, str]:
    n = next(_serial)
    return f"{NS_PREFIX}{os.getpid()}-{n}", f"rt{os.getpid()}x{n}"[:15]


def make_peer(mode: str = "tap", *, queues: int = 1, pcap_path: str | None = None,
              rx_queues: int | None = None, kernel_mtu: int | None = None) -> Peer:
    ns_name, ifname = unique_names()
    kernel, rcunet = (KERNEL, RCUNET) if mode == "tap" else (TUN_KERNEL, TUN_RCUNET)
    ns = Namespace(ns_name).create()
    host: Host | None = None
    device: TapDevice | None = None
    try:
        device = TapDevice(ifname, mode=mode, queues=queues)
        ns.adopt(ifname)
        for version, prefix in ((4, 24), (6, 64)):
            ns.add_address(ifname, f"{kernel[version]}/{prefix}")
        # The kernel queues frames for our reader in a ring of txqueuelen (500 on TAP);
        # a loaded machine can leave the reader unscheduled through a burst (900
        # multicast datagrams), so give the ring room, as one would for a slow consumer.
        ns.set_link(ifname, up=True, mtu=kernel_mtu, txqlen=TXQLEN)
        host = Host(f"rcunet-{mode}", rx_queues=rx_queues or queues)
        pcap = PcapWriter(pcap_path, linktype=device.linktype) if pcap_path else None
        iface = device.attach(host, addresses=[f"{rcunet[4]}/24", f"{rcunet[6]}/64"],
                              pcap=pcap)
        host.start()
        device.start()
        peer = Peer(ns, host, device, iface, ifname, kernel, rcunet, pcap_path)
        if pcap is not None:
            peer.extra.append(pcap)
        return peer
    except BaseException:
        if host is not None:
            host.close()
        if device is not None:
            device.close()
        ns.close()
        raise


def close_peer(peer: Peer) -> None:
    try:
        peer.host.close()
    finally:
        try:
            peer.device.close()
        finally:
            for item in peer.extra:
                if isinstance(item, PcapWriter):
                    item.close()
            peer.ns.close()


def tshark_problems(path: str) -> tuple[int, list[str]]:
    """(frames, problem lines): malformed packets, bad checksums, expert errors, and
    expert warnings other than "connection reset" (stopping rcunet resets what is still
    open, as a host going down does)."""
    tshark = need_tool("tshark")
    prefs = ["-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE",
             "-o", "udp.check_checksum:TRUE"]
    count = subprocess.run([tshark, "-n", "-r", path, *prefs], capture_output=True,
                           check=True, timeout=60).stdout.decode().count("\n")
    # tcp.checksum.ffff: 0xFFFF where 0x0000 is computed, the same one's-complement zero
    # (RFC 1624 §3).  Linux's skb_checksum_help writes it for a segment whose checksum
    # folds to 0 (CSUM_MANGLED_0), about one in 65,536; rcunet's fold never does
    # (tests/wire/test_checksum.py holds it to RFC 1071's reference).
    # Wireshark calls it a bad checksum (an error): such a frame is still checked for
    # malformation and for its IP/UDP/ICMP checksums.
    problems = ("_ws.malformed "
                "or (_ws.expert.severity >= error and not tcp.checksum.ffff) "
                "or (_ws.expert.severity >= warning and not tcp.flags.reset == 1 "
                "and not tcp.checksum.ffff) "
                "or ip.checksum.status == 0 "
                "or (tcp.checksum.status == 0 and not tcp.checksum.ffff) "
                "or udp.checksum.status == 0 "
                "or icmp.checksum.status == 0 or icmpv6.checksum.status == 0")
    result = subprocess.run([tshark, "-n", "-r", path, *prefs, "-Y", problems],
                            capture_output=True, check=False, timeout=60)
    lines = [line for line in result.stdout.decode().splitlines() if line.strip()]
    lines += [line for line in result.stderr.decode().splitlines()
              if line.strip() and "Running as user" not in line and "dangerous" not in line]
    return count, lines
