"""The TAP/TUN driver itself: multi-queue receive, TCP over TUN, losing the device,
opening errors, captures that tshark reads without complaint."""

from __future__ import annotations

import errno
import re
import socket
import subprocess

import pytest
from iop_support import Peer, close_peer, make_peer, tshark_problems, unique_names, used

from rcunet.link.netns import Namespace
from rcunet.link.tap import TapDevice, TapError
from rcunet.services import start_services


def test_multi_queue_tap_spreads_flows_over_queues() -> None:
    peer = make_peer("tap", queues=2)
    try:
        assert peer.device.queues == 2
        with start_services(peer.host, "http:80,udp-echo:7"):
            # many short connections: new 4-tuples each, steered by the kernel's flow hash
            result = peer.run(["ab", "-q", "-n", "200", "-c", "4", "-s", "20",
                               f"http://{peer.rcunet[4]}/"], timeout=120)
            assert re.search(r"Failed requests:\s+0\b", result.stdout.decode())
        per_queue = list(peer.device.rx_per_queue)
        assert sum(per_queue) == peer.device.stats()["rx_packets"]
        assert all(count > 0 for count in per_queue), per_queue
    finally:
        close_peer(peer)
    used("ab")


def test_tcp_and_udp_over_tun(tun_peer: Peer) -> None:
    with start_services(tun_peer.host, "http:80,udp-echo:7"):
        for version in (4, 6):
            host = tun_peer.rcunet[version]
            url = f"http://{f'[{host}]' if version == 6 else host}/bytes/300000"
            out = tun_peer.run(["curl", "-sS", "-g", "-m", "20", "-o", "/dev/null", "-w",
                                "%{http_code} %{size_download}", url]).stdout
            assert out == b"200 300000"
            target = f"UDP{version}:{f'[{host}]' if version == 6 else host}:7"
            echoed = tun_peer.run(["socat", "-t", "1", "-", target], input=b"tun\n").stdout
            assert echoed == b"tun\n"
    used("curl")
    used("socat")


def test_deleting_the_device_is_reported_and_the_host_survives(peer: Peer) -> None:
    lost: list[str] = []
    peer.device.on_lost = lost.append
    with start_services(peer.host, "udp-echo:7") as services:
        peer.run(["ip", "link", "del", peer.ifname])
        reason = peer.device.wait_lost(5)
        assert reason is not None and "lost" in reason
        assert lost == [reason]  # reported once
        # sending after the loss drops quietly (counted), nothing raises into the Host
        sock = peer.host.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.sendto(b"nowhere", (peer.kernel[4], 9))
        sock.close()
        assert peer.device.stats().get("tx_dropped", 0) >= 1
        assert services.services[0].served == 0
    assert peer.counters().get("RcunetRxExceptions", 0) == 0
    used("ip link del")


def test_opening_errors_are_clear() -> None:
    with pytest.raises(ValueError, match="interface name"):
        TapDevice("x" * 16)
    with pytest.raises(ValueError, match="queues"):
        TapDevice("rcunetbad", queues=0)
    _ns_name, ifname = unique_names()
    # A persistent single-queue TUN: asking for it as a multi-queue TAP is refused.
    subprocess.run(["ip", "tuntap", "add", "dev", ifname, "mode", "tun"], check=True)
    try:
        with pytest.raises(TapError) as info:
            TapDevice(ifname, mode="tap", queues=2)
        assert info.value.errno == errno.EINVAL
        assert "exists with other flags" in str(info.value)
        with TapDevice(ifname, mode="tun") as device:  # the right flags attach
            assert device.queues == 1
    finally:
        subprocess.run(["ip", "link", "del", ifname], check=False)


@pytest.mark.parametrize("mode", ["tap", "tun"])
def test_capture_opens_in_tshark_without_warnings(mode: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / f"{mode}.pcap")
    peer = make_peer(mode, pcap_path=path)
    try:
        with start_services(peer.host, "http:80,udp-echo:7,echo:7"):
            for version in (4, 6):
                host = peer.rcunet[version]
                bracketed = f"[{host}]" if version == 6 else host
                peer.run(["ping", f"-{version}", "-c", "2", "-i", "0.2", host])
                peer.run(["curl", "-sS", "-g", "-m", "20", "-o", "/dev/null",
                          f"http://{bracketed}/bytes/200000"])
                peer.run(["socat", "-t", "1", "-", f"UDP{version}:{bracketed}:7"], input=b"u\n")
                peer.run(["nc", f"-{version}", "-N", "-w", "5", host, "7"], input=b"t\n" * 500)
    finally:
        close_peer(peer)
    frames, problems = tshark_problems(path)
    assert frames > 100, frames
    assert problems == [], "\n".join(problems[:20])
    used("tshark")


def test_namespace_cleans_up_after_a_failure() -> None:
    ns_name, ifname = unique_names()
    with pytest.raises(RuntimeError):
        with Namespace(ns_name) as ns:
            ns.add_veth(ifname, ifname[:-1] + "p")
            assert ns.link_exists(ifname)
            sleeper = ns.spawn(["sleep", "60"])
            raise RuntimeError("the test body failed")
    assert sleeper.poll() is not None  # the process it started was killed
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, check=True)
    assert ns_name.encode() not in listed.stdout
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, check=True)
    assert ifname.encode() not in links.stdout
