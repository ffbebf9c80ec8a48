#!/usr/bin/env python3
"""Regenerate the shipped sample capture(s) with rcunet's own codecs and pcap writer.

    python3 samples/make_samples.py          # rewrites samples/handshake.pcap

``handshake.pcap`` is what host A (10.0.0.1, 2001:db8::1) and host B (10.0.0.2,
2001:db8::2) say on one Ethernet segment: ARP request and reply; a TCP connection
(SYN with every option Linux sends, SYN-ACK, ACK, data both ways, FIN/ACK close); an
ICMP echo and its reply; a UDP datagram; an IPv6 neighbor solicitation and
advertisement; and an IPv6 TCP SYN.  The output is byte-for-byte deterministic.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # run from a checkout without installing

from rcunet.link.pcap import PcapWriter  # noqa: E402
from rcunet.wire import arp, ethernet, icmpv4, icmpv6, ipv4, ipv6, tcp, udp  # noqa: E402

MAC_A = bytes.fromhex("020000000001")
MAC_B = bytes.fromhex("020000000002")
IP_A = bytes([10, 0, 0, 1])
IP_B = bytes([10, 0, 0, 2])
IP6_A = bytes.fromhex("20010db8000000000000000000000001")
IP6_B = bytes.fromhex("20010db8000000000000000000000002")
SOLICITED_B = bytes.fromhex("ff0200000000000000000001ff000002")  # ff02::1:ff00:2
MAC_SOLICITED_B = bytes.fromhex("3333ff000002")

START_NS = 1_700_000_000_000_000_000
ISN_A = 3_000_000_000
ISN_B = 1_000
PORT_A, PORT_B = 34567, 7777
REQUEST = b"GET /hello\r\n"
RESPONSE = b"hello from rcunet\r\n"


def eth(src: bytes, dst: bytes, ethertype: int, payload: bytes) -> bytes:
    return ethernet.Repr(dst, src, ethertype, payload).build()


def ip4(src: bytes, dst: bytes, protocol: int, payload: bytes, ident: int,
        df: bool = True) -> bytes:
    return ipv4.Repr(src, dst, protocol, payload, ttl=64, ident=ident,
                     dont_fragment=df).build()


def tcp4(a_to_b: bool, ident: int, segment: tcp.Repr) -> bytes:
    src, dst = (IP_A, IP_B) if a_to_b else (IP_B, IP_A)
    data = segment.build(src=src, dst=dst)
    assert isinstance(data, bytes)
    packet = ip4(src, dst, ipv4.PROTO_TCP, data, ident)
    return eth(MAC_A if a_to_b else MAC_B, MAC_B if a_to_b else MAC_A,
               ethernet.ETHERTYPE_IPV4, packet)


def ip6(src: bytes, dst: bytes, next_header: int, payload: bytes, hop_limit: int) -> bytes:
    data = ipv6.Repr(src, dst, next_header, payload, hop_limit=hop_limit).build()
    assert isinstance(data, bytes)
    return data


def handshake_frames() -> list[tuple[int, bytes]]:
    """(timestamp_ns, Ethernet frame) of the sample conversation, in order."""
    frames: list[bytes] = []
    arp_request = arp.Repr(arp.REQUEST, MAC_A, IP_A, b"\x00" * 6, IP_B).build()
    frames.append(eth(MAC_A, ethernet.BROADCAST, ethernet.ETHERTYPE_ARP, arp_request))
    arp_reply = arp.Repr(arp.REPLY, MAC_B, IP_B, MAC_A, IP_A).build()
    frames.append(eth(MAC_B, MAC_A, ethernet.ETHERTYPE_ARP, arp_reply))

    a_seq, b_seq = ISN_A, ISN_B
    frames.append(tcp4(True, 0, tcp.Repr(
        PORT_A, PORT_B, a_seq, 0, tcp.SYN, 64240, mss=1460, sack_permitted=True,
        timestamp=(1000, 0), window_scale=7)))
    frames.append(tcp4(False, 0, tcp.Repr(
        PORT_B, PORT_A, b_seq, a_seq + 1, tcp.SYN | tcp.ACK, 65160, mss=1460,
        sack_permitted=True, timestamp=(5000, 1000), window_scale=7)))
    a_seq, b_seq = a_seq + 1, b_seq + 1
    frames.append(tcp4(True, 1, tcp.Repr(
        PORT_A, PORT_B, a_seq, b_seq, tcp.ACK, 502, timestamp=(1001, 5000))))
    frames.append(tcp4(True, 2, tcp.Repr(
        PORT_A, PORT_B, a_seq, b_seq, tcp.PSH | tcp.ACK, 502, REQUEST,
        timestamp=(1001, 5000))))
    a_seq += len(REQUEST)
    frames.append(tcp4(False, 1, tcp.Repr(
        PORT_B, PORT_A, b_seq, a_seq, tcp.ACK, 509, timestamp=(5001, 1001))))
    frames.append(tcp4(False, 2, tcp.Repr(
        PORT_B, PORT_A, b_seq, a_seq, tcp.PSH | tcp.ACK, 509, RESPONSE,
        timestamp=(5001, 1001))))
    b_seq += len(RESPONSE)
    frames.append(tcp4(True, 3, tcp.Repr(
        PORT_A, PORT_B, a_seq, b_seq, tcp.ACK, 502, timestamp=(1002, 5001))))
    frames.append(tcp4(True, 4, tcp.Repr(
        PORT_A, PORT_B, a_seq, b_seq, tcp.FIN | tcp.ACK, 502, timestamp=(1002, 5001))))
    a_seq += 1
    frames.append(tcp4(False, 3, tcp.Repr(
        PORT_B, PORT_A, b_seq, a_seq, tcp.FIN | tcp.ACK, 509, timestamp=(5002, 1002))))
    b_seq += 1
    frames.append(tcp4(True, 5, tcp.Repr(
        PORT_A, PORT_B, a_seq, b_seq, tcp.ACK, 502, timestamp=(1003, 5002))))

    ping_data = bytes(range(0x10, 0x10 + 56))
    echo = icmpv4.Repr.echo_request(0x1234, 1, ping_data).build()
    frames.append(eth(MAC_A, MAC_B, ethernet.ETHERTYPE_IPV4,
                      ip4(IP_A, IP_B, ipv4.PROTO_ICMP, echo, 0x4321)))
    reply = icmpv4.Repr.echo_reply(0x1234, 1, ping_data).build()
    frames.append(eth(MAC_B, MAC_A, ethernet.ETHERTYPE_IPV4,
                      ip4(IP_B, IP_A, ipv4.PROTO_ICMP, reply, 0x8765, df=False)))

    datagram = udp.Repr(40000, 9999, b"hello, rcunet").build(src=IP_A, dst=IP_B)
    assert isinstance(datagram, bytes)
    frames.append(eth(MAC_A, MAC_B, ethernet.ETHERTYPE_IPV4,
                      ip4(IP_A, IP_B, ipv4.PROTO_UDP, datagram, 0x4322)))

    solicit = icmpv6.Repr.neighbor_solicit(IP6_B, (icmpv6.SourceLinkAddr(MAC_A),))
    frames.append(eth(MAC_A, MAC_SOLICITED_B, ethernet.ETHERTYPE_IPV6, ip6(
        IP6_A, SOLICITED_B, icmpv6.PROTOCOL, solicit.build(src=IP6_A, dst=SOLICITED_B), 255)))
    advert = icmpv6.Repr.neighbor_advert(IP6_B, solicited=True, override=True,
                                         options=(icmpv6.TargetLinkAddr(MAC_B),))
    frames.append(eth(MAC_B, MAC_A, ethernet.ETHERTYPE_IPV6, ip6(
        IP6_B, IP6_A, icmpv6.PROTOCOL, advert.build(src=IP6_B, dst=IP6_A), 255)))
    syn6 = tcp.Repr(PORT_A + 1, PORT_B, 4_000_000_000, 0, tcp.SYN, 64800, mss=1440,
                    sack_permitted=True, timestamp=(2000, 0), window_scale=7)
    segment = syn6.build(src=IP6_A, dst=IP6_B)
    assert isinstance(segment, bytes)
    frames.append(eth(MAC_A, MAC_B, ethernet.ETHERTYPE_IPV6,
                      ip6(IP6_A, IP6_B, ipv6.PROTO_TCP, segment, 64)))
    # 150 µs between frames: readable timestamps, strictly increasing.
    return [(START_NS + i * 150_000, frame) for i, frame in enumerate(frames)]


def write_handshake(path: Path) -> int:
    """Write the sample to ``path``; return the number of frames."""
    frames = handshake_frames()
    with PcapWriter(path) as writer:
        for timestamp_ns, frame in frames:
            writer.write(timestamp_ns, frame)
    return len(frames)


def main() -> int:
    path = HERE / "handshake.pcap"
    count = write_handshake(path)
    print(f"wrote {count} frames to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
