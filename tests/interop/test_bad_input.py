"""Bad frames written onto the device by a raw (AF_PACKET) writer on the kernel side are
dropped and counted, and the Host keeps serving.

The frames are built here with struct and an independent checksum, not with rcunet's
codecs, so a codec bug cannot make a bad frame look good or a good one bad."""

from __future__ import annotations

import struct
import sys

from iop_support import Peer, used

from rcunet.services import start_services

_RAW_WRITER = r"""
import socket, sys
ifname = sys.argv[1]
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.bind((ifname, 0))
for line in sys.stdin.read().split():
    s.send(bytes.fromhex(line))
"""


def _csum(data: bytes) -> int:
    if len(data) % 2:
        data += b"\0"
    total = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while total >> 16:
        total = (total & 0xFFFF) + (total >> 16)
    return ~total & 0xFFFF


def _ipv4(src: str, dst: str, proto: int, payload: bytes, *, bad_csum: bool = False) -> bytes:
    import socket

    header = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(payload), 0x1234, 0x4000, 64,
                         proto, 0, socket.inet_aton(src), socket.inet_aton(dst))
    checksum = _csum(header) ^ (0x5555 if bad_csum else 0)
    return header[:10] + struct.pack("!H", checksum) + header[12:] + payload


def _pseudo(src: str, dst: str, proto: int, length: int) -> bytes:
    import socket

    return socket.inet_aton(src) + socket.inet_aton(dst) + struct.pack("!BBH", 0, proto, length)


def _udp(src: str, dst: str, sport: int, dport: int, data: bytes, *, bad: bool = False) -> bytes:
    header = struct.pack("!HHHH", sport, dport, 8 + len(data), 0)
    checksum = _csum(_pseudo(src, dst, 17, 8 + len(data)) + header + data) or 0xFFFF
    if bad:
        checksum ^= 0x00FF
    return header[:6] + struct.pack("!H", checksum) + data


def _tcp_syn(src: str, dst: str, sport: int, dport: int, *, bad: bool = False) -> bytes:
    header = struct.pack("!HHIIBBHHH", sport, dport, 1000, 0, 5 << 4, 0x02, 65535, 0, 0)
    checksum = _csum(_pseudo(src, dst, 6, len(header)) + header)
    if bad:
        checksum ^= 0x0F0F
    return header[:16] + struct.pack("!H", checksum) + header[18:]


def _ipv6_udp(src: str, dst: str, sport: int, dport: int, data: bytes, *,
              bad: bool = False) -> bytes:
    import socket

    s, d = socket.inet_pton(socket.AF_INET6, src), socket.inet_pton(socket.AF_INET6, dst)
    length = 8 + len(data)
    header = struct.pack("!HHHH", sport, dport, length, 0)
    pseudo = s + d + struct.pack("!I3xB", length, 17)
    checksum = (_csum(pseudo + header + data) or 0xFFFF) ^ (0x00FF if bad else 0)
    udp = header[:6] + struct.pack("!H", checksum) + data
    return struct.pack("!IHBB", 6 << 28, length, 17, 64) + s + d + udp


def _eth(dst: bytes, src: bytes, payload: bytes, ethertype: int = 0x0800) -> bytes:
    return dst + src + struct.pack("!H", ethertype) + payload


def test_bad_frames_are_dropped_and_counted_and_the_host_keeps_serving(peer: Peer) -> None:
    ours = peer.iface.mac
    assert ours is not None
    kernel_mac = peer.ns.link_mac(peer.ifname)
    k, r = peer.kernel[4], peer.rcunet[4]
    k6, r6 = peer.kernel[6], peer.rcunet[6]
    peer.ns.set_link(peer.ifname, mtu=9000)  # so the kernel lets the writer send a jumbo

    good_udp = _ipv4(k, r, 17, _udp(k, r, 40000, 7, b"fine"))
    frames = {
        "runt": _eth(ours, kernel_mac, b""),  # 14 bytes: a header and nothing else
        "truncated_ip": _eth(ours, kernel_mac, good_udp[:12]),
        "other_mac": _eth(b"\x02\x99\x99\x99\x99\x99", kernel_mac, good_udp),
        "bad_ip_csum": _eth(ours, kernel_mac,
                            _ipv4(k, r, 17, _udp(k, r, 40000, 7, b"x"), bad_csum=True)),
        "bad_udp_csum": _eth(ours, kernel_mac,
                             _ipv4(k, r, 17, _udp(k, r, 40000, 7, b"bad", bad=True))),
        "bad_tcp_csum": _eth(ours, kernel_mac,
                             _ipv4(k, r, 6, _tcp_syn(k, r, 40001, 80, bad=True))),
        "jumbo": _eth(ours, kernel_mac,
                      _ipv4(k, r, 17, _udp(k, r, 40000, 7, bytes(8000)))),
        "bad_udp6_csum": _eth(ours, kernel_mac,
                              _ipv6_udp(k6, r6, 40000, 7, b"bad6", bad=True), 0x86DD),
        "truncated_ipv6": _eth(ours, kernel_mac,
                               _ipv6_udp(k6, r6, 40000, 7, b"cut")[:30], 0x86DD),
    }
    with start_services(peer.host, "udp-echo:7,http:80") as services:
        udp_echo = services.services[0]
        before = peer.counters()
        stdin = "\n".join(frame.hex() for frame in frames.values()).encode()
        for _ in range(3):
            peer.run([sys.executable, "-c", _RAW_WRITER, peer.ifname], input=stdin)
        # the device still works: ping and UDP echo answer after the garbage
        result = peer.run(["ping", "-c", "2", "-i", "0.2", "-W", "2", r], check=False)
        assert result.returncode == 0, result.stdout.decode()
        message = b"still serving\n"
        echoed = peer.run(["socat", "-t", "1", "-", f"UDP4:{r}:7"], input=message).stdout
        assert echoed == message
        echoed6 = peer.run(["socat", "-t", "1", "-", f"UDP6:[{r6}]:7"], input=message).stdout
        assert echoed6 == message
        after = peer.counters()
        assert udp_echo.served == 2  # only socat's datagrams reached the service

    def grew(*names: str) -> int:
        return sum(after.get(n, 0) - before.get(n, 0) for n in names)

    assert grew("IpInTruncatedPkts", "IpInHdrErrors", "RcunetEthInErrors") >= 6  # runt + trunc
    assert grew("RcunetEthOtherHost") == 3
    assert grew("IpInCsumErrors") == 3
    assert grew("UdpInCsumErrors") == 3
    assert grew("Udp6InCsumErrors") == 3
    assert grew("Ip6InTruncatedPkts", "Ip6InHdrErrors") == 3
    assert grew("TcpInCsumErrors") == 3
    assert grew("RcunetLinkRxLengthErrors") == 3
    assert peer.device.stats().get("rx_length_errors") == 3
    assert grew("RcunetRxExceptions") == 0  # nothing reached the receive path's safety net
    used("AF_PACKET raw writer")
