"""``rcunet demo``: three Hosts in one process — a client, a router and a server on two
subnets — exchanging real IPv4/IPv6 traffic, with a tcpdump-style trace and counters."""

from __future__ import annotations

import argparse
import io
import socket


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--pcap", metavar="FILE", help="also write every frame of the "
                        "client's link to a pcap file")
    parser.add_argument("--quiet", action="store_true", help="no per-frame trace")


def run(args: argparse.Namespace) -> int:
    from rcunet.api import Socket, host_socket
    from rcunet.host.network import Network
    from rcunet.link.pcap import LINKTYPE_ETHERNET, PcapWriter
    from rcunet.wire.pretty import line

    net, client, router, server = Network.routed()
    trace: list[str] = []
    buffer = io.BytesIO()
    writer = PcapWriter(buffer, linktype=LINKTYPE_ETHERNET)

    class Tap:
        def write(self, timestamp_ns: int, frame: bytes) -> None:
            writer.write(timestamp_ns, frame)
            trace.append(line(timestamp_ns, frame, LINKTYPE_ETHERNET))

    net.links[0].endpoints[0].tap = Tap()

    def say(text: str) -> None:
        print(text)

    say("rcunet demo: client 10.1.0.2 / fd01::2 -- router -- server 10.2.0.2 / fd02::2\n")
    echo4 = Socket(server, socket.AF_INET, socket.SOCK_DGRAM)
    echo4.bind(("", 7))
    echo4.setblocking(False)
    echo6 = Socket(server, socket.AF_INET6, socket.SOCK_DGRAM)
    echo6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    echo6.bind(("", 7))
    echo6.setblocking(False)

    def serve_echo() -> bool:
        served = False
        for sock in (echo4, echo6):
            while True:
                try:
                    data, peer = sock.recvfrom(65535)
                except BlockingIOError:
                    break
                sock.sendto(data, peer)
                served = True
        return served

    for family, address, size in ((socket.AF_INET, "10.2.0.2", 64),
                                  (socket.AF_INET6, "fd02::2", 64),
                                  (socket.AF_INET, "10.2.0.2", 4000)):
        sock = Socket(client, family, socket.SOCK_DGRAM)
        sock.setblocking(False)
        payload = bytes(range(256)) * (size // 256) + bytes(size % 256)
        sock.sendto(payload, (address, 7))
        got: list[bytes] = []

        def answered(sock: Socket = sock, got: list[bytes] = got) -> bool:
            serve_echo()
            try:
                got.append(sock.recv(65535))
            except BlockingIOError:
                return False
            return True

        ok = net.run_until(answered, timeout=5.0)
        verdict = "echoed intact" if ok and got and got[0] == payload else "LOST"
        say(f"UDP echo {size:>5} bytes to {address:<9} -> {verdict}")
        sock.close()

    pongs: list[tuple[int, bytes]] = []
    client.ip.icmp.echo_listeners.append(lambda family, src, msg: pongs.append((family, src)))
    client.ip.icmp.ping(bytes([10, 2, 0, 2]), ident=1, seq=1, data=b"rcunet ping")
    client.ip.icmp.ping(bytes.fromhex("fd020000000000000000000000000002"), 1, 1, b"rcunet ping6")
    net.run_until(lambda: len(pongs) == 2, timeout=5.0)
    say(f"ping 10.2.0.2 and fd02::2 -> {len(pongs)} of 2 replies")

    closed = Socket(client, socket.AF_INET, socket.SOCK_DGRAM)
    closed.setblocking(False)
    closed.connect(("10.2.0.2", 9999))
    closed.send(b"anyone?")
    net.run_until(lambda: bool(host_socket(closed).err), timeout=5.0)
    try:
        closed.recv(100)
        outcome = "no error"
    except OSError as exc:
        outcome = f"{type(exc).__name__} ({exc.strerror})"
    say(f"UDP to a closed port -> ICMP port unreachable -> {outcome}")

    if not args.quiet:
        say("\nclient link trace:")
        for text in trace:
            say("  " + text)
    say("\ncounters (nstat names):")
    for host in (client, router, server):
        values = host.counters.nonzero()
        interesting = {k: v for k, v in values.items() if not k.startswith("Rcunet")}
        say(f"  {host.name}: " + ", ".join(f"{k}={v}" for k, v in interesting.items()))
    if args.pcap:
        with open(args.pcap, "wb") as out:
            out.write(buffer.getvalue())
        say(f"\nwrote {len(trace)} frames to {args.pcap}")
    net.close()
    return 0
