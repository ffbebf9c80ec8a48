"""``rcunet decode`` and the tcpdump-style summaries behind it (``rcunet.wire.pretty``).

The golden lines and the expected summaries below were checked against tcpdump 4.99.3
(``tcpdump -nn -tt -S -r``, and ``-v`` for the checksum notes): identical output, except
where noted (the 802.1Q tag, shown as ``tcpdump -e`` shows it; undecodable layers).
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.cli import main
from rcunet.link.pcap import LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapWriter
from rcunet.wire import ethernet, icmpv4, icmpv6, ipv4, ipv6, pretty, tcp, udp

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "samples" / "handshake.pcap"

GOLDEN = """\
1700000000.000000 ARP, Request who-has 10.0.0.2 tell 10.0.0.1, length 28
1700000000.000150 ARP, Reply 10.0.0.2 is-at 02:00:00:00:00:02, length 28
1700000000.000300 IP 10.0.0.1.34567 > 10.0.0.2.7777: Flags [S], seq 3000000000, win 64240, options [mss 1460,sackOK,TS val 1000 ecr 0,nop,wscale 7], length 0
1700000000.000450 IP 10.0.0.2.7777 > 10.0.0.1.34567: Flags [S.], seq 1000, ack 3000000001, win 65160, options [mss 1460,sackOK,TS val 5000 ecr 1000,nop,wscale 7], length 0
1700000000.000600 IP 10.0.0.1.34567 > 10.0.0.2.7777: Flags [.], ack 1001, win 502, options [nop,nop,TS val 1001 ecr 5000], length 0
1700000000.000750 IP 10.0.0.1.34567 > 10.0.0.2.7777: Flags [P.], seq 3000000001:3000000013, ack 1001, win 502, options [nop,nop,TS val 1001 ecr 5000], length 12
1700000000.000900 IP 10.0.0.2.7777 > 10.0.0.1.34567: Flags [.], ack 3000000013, win 509, options [nop,nop,TS val 5001 ecr 1001], length 0
1700000000.001050 IP 10.0.0.2.7777 > 10.0.0.1.34567: Flags [P.], seq 1001:1020, ack 3000000013, win 509, options [nop,nop,TS val 5001 ecr 1001], length 19
1700000000.001200 IP 10.0.0.1.34567 > 10.0.0.2.7777: Flags [.], ack 1020, win 502, options [nop,nop,TS val 1002 ecr 5001], length 0
1700000000.001350 IP 10.0.0.1.34567 > 10.0.0.2.7777: Flags [F.], seq 3000000013, ack 1020, win 502, options [nop,nop,TS val 1002 ecr 5001], length 0
1700000000.001500 IP 10.0.0.2.7777 > 10.0.0.1.34567: Flags [F.], seq 1020, ack 3000000014, win 509, options [nop,nop,TS val 5002 ecr 1002], length 0
1700000000.001650 IP 10.0.0.1.34567 > 10.0.0.2.7777: Flags [.], ack 1021, win 502, options [nop,nop,TS val 1003 ecr 5002], length 0
1700000000.001800 IP 10.0.0.1 > 10.0.0.2: ICMP echo request, id 4660, seq 1, length 64
1700000000.001950 IP 10.0.0.2 > 10.0.0.1: ICMP echo reply, id 4660, seq 1, length 64
1700000000.002100 IP 10.0.0.1.40000 > 10.0.0.2.9999: UDP, length 13
1700000000.002250 IP6 2001:db8::1 > ff02::1:ff00:2: ICMP6, neighbor solicitation, who has 2001:db8::2, length 32
1700000000.002400 IP6 2001:db8::2 > 2001:db8::1: ICMP6, neighbor advertisement, tgt is 2001:db8::2, length 32
1700000000.002550 IP6 2001:db8::1.34568 > 2001:db8::2.7777: Flags [S], seq 4000000000, win 64800, options [mss 1440,sackOK,TS val 2000 ecr 0,nop,wscale 7], length 0
"""  # noqa: E501


def load_make_samples() -> ModuleType:
    spec = importlib.util.spec_from_file_location("make_samples", ROOT / "samples/make_samples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SAMPLE_FRAMES = [frame for _, frame in load_make_samples().handshake_frames()]
A4, B4 = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
A6 = bytes.fromhex("20010db8000000000000000000000001")
B6 = bytes.fromhex("20010db8000000000000000000000002")
MAC_A, MAC_B = bytes.fromhex("020000000001"), bytes.fromhex("020000000002")


def frame4(protocol: int, payload: bytes, **ip_fields: object) -> bytes:
    packet = ipv4.Repr(A4, B4, protocol, payload, **ip_fields).build()  # type: ignore[arg-type]
    return ethernet.Repr(MAC_B, MAC_A, ethernet.ETHERTYPE_IPV4, packet).build()


def frame6(next_header: int, payload: bytes, extensions: tuple[ipv6.Extension, ...] = ()) -> bytes:
    packet = ipv6.Repr(A6, B6, next_header, payload, extensions=extensions).build()
    assert isinstance(packet, bytes)
    return ethernet.Repr(MAC_B, MAC_A, ethernet.ETHERTYPE_IPV6, packet).build()


def flipped(frame: bytes, index: int) -> bytes:
    out = bytearray(frame)
    out[index] ^= 0xFF
    return bytes(out)


def decode(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    status = main(["decode", *args])
    out, err = capsys.readouterr()
    return status, out, err


# ------------------------------------------------------------------ the command


def test_sample_capture_decodes_to_the_golden_lines(capsys: pytest.CaptureFixture[str]) -> None:
    assert decode(capsys, str(SAMPLE)) == (0, GOLDEN, "")


def test_verify_checksums_finds_nothing_wrong_in_the_sample(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert decode(capsys, "--verify-checksums", str(SAMPLE)) == (0, GOLDEN, "")


def test_count_stops_early(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, _ = decode(capsys, "-c", "3", str(SAMPLE))
    assert status == 0
    assert out.splitlines() == GOLDEN.splitlines()[:3]


def test_count_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    status, out, err = decode(capsys, "-c", "0", str(SAMPLE))
    assert (status, out) == (2, "")
    assert err.startswith("rcunet decode: -c needs a count >= 1")


def test_committed_sample_is_what_make_samples_writes(tmp_path: Path) -> None:
    fresh = tmp_path / "handshake.pcap"
    load_make_samples().write_handshake(fresh)
    assert fresh.read_bytes() == SAMPLE.read_bytes()


def test_corrupt_capture_prints_good_frames_then_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = SAMPLE.read_bytes()
    path = tmp_path / "cut.pcap"
    path.write_bytes(data[: 24 + 16 + 42 + 16 + 42 + 20])  # two ARP records, then a cut
    status, out, err = decode(capsys, str(path))
    assert status == 1
    assert out.splitlines() == GOLDEN.splitlines()[:2]
    assert err == f"rcunet decode: {path}: at offset 156: truncated pcap record data: " \
        "needed 74 bytes, 4 present\n"


@pytest.mark.parametrize("kind", ["missing", "directory", "not-a-capture", "empty"])
def test_bad_files_exit_nonzero_with_one_line_and_no_traceback(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "x.pcap"
    if kind == "directory":
        path.mkdir()
    elif kind == "not-a-capture":
        path.write_text("# rcunet\nnot a capture\n")
    elif kind == "empty":
        path.write_bytes(b"")
    result = subprocess.run([sys.executable, "-m", "rcunet", "decode", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode in (1, 2)
    assert result.stdout == ""
    assert "Traceback" not in result.stderr
    assert len(result.stderr.splitlines()) == 1
    expected = {"missing": "No such file or directory", "directory": "Is a directory",
                "not-a-capture": "at offset 0: unknown magic", "empty": "at offset 0"}[kind]
    assert expected in result.stderr


def test_dash_reads_the_capture_from_standard_input() -> None:
    result = subprocess.run([sys.executable, "-m", "rcunet", "decode", "-c", "2", "-"],
                            input=SAMPLE.read_bytes(), capture_output=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, b"")
    assert result.stdout.decode().splitlines() == GOLDEN.splitlines()[:2]


def test_readme_command_runs_from_the_repository() -> None:
    result = subprocess.run([sys.executable, "-m", "rcunet", "decode", "samples/handshake.pcap"],
                            capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert (result.returncode, result.stdout, result.stderr) == (0, GOLDEN, "")


# ------------------------------------------------------------------ summaries


def test_timestamps_and_link_types() -> None:
    assert pretty.format_timestamp(None) == "-"
    assert pretty.format_timestamp(1_700_000_000_000_999_999) == "1700000000.000999"
    raw = SAMPLE_FRAMES[2][14:]
    assert pretty.summarize(raw, LINKTYPE_RAW) == pretty.summarize(SAMPLE_FRAMES[2])
    assert pretty.summarize(SAMPLE_FRAMES[17][14:], LINKTYPE_RAW).startswith("IP6 2001:db8::1.")
    assert pretty.summarize(b"\x50" * 30, LINKTYPE_RAW) == "[ip: bad-version: IP version 5]"
    assert pretty.summarize(b"", LINKTYPE_RAW) == "[ip: truncated: empty packet]"
    assert pretty.summarize(b"abc", 147) == "unsupported link type 147, length 3"
    assert pretty.line(None, SAMPLE_FRAMES[0]).startswith("- ARP, Request")


@pytest.mark.parametrize(
    ("frame", "note"),
    [
        (flipped(SAMPLE_FRAMES[2], 14 + 20 + 16), "[S], cksum 0x81eb (incorrect -> 0x7eeb), "),
        (flipped(SAMPLE_FRAMES[2], 14 + 10), "IP (bad cksum d9ba (->26ba)!) 10.0.0.1.34567"),
        (flipped(SAMPLE_FRAMES[12], 14 + 20 + 2), "length 64 (wrong icmp cksum d3f6 (->2cf6)!)"),
        (flipped(SAMPLE_FRAMES[14], 14 + 20 + 6), ": [bad udp cksum 0x8126 -> 0x7e26!] UDP, "),
        (flipped(SAMPLE_FRAMES[15], 14 + 40 + 2),
         ": [bad icmp6 cksum 0xe327 -> 0x1c27!] ICMP6, neighbor solicitation"),
        (flipped(SAMPLE_FRAMES[17], 14 + 40 + 16), "cksum 0xd4d9 (incorrect -> 0x2bd9)"),
    ],
    ids=["tcp", "ip", "icmp", "udp", "icmp6", "tcp6"],
)
def test_bad_checksums_are_marked_only_when_asked(frame: bytes, note: str) -> None:
    assert note in pretty.summarize(frame, verify_checksums=True)
    plain = pretty.summarize(frame)
    assert "cksum" not in plain


def test_vlan_tag_and_unknown_ethertype() -> None:
    eth = ethernet.Repr.parse(SAMPLE_FRAMES[14])
    tagged = ethernet.Repr(eth.dst, eth.src, eth.ethertype, eth.payload, vlan=10, vlan_pcp=3)
    assert pretty.summarize(tagged.build()) == (
        "vlan 10, p 3, ethertype IPv4 (0x0800), IP 10.0.0.1.40000 > 10.0.0.2.9999: UDP, length 13"
    )
    lldp = ethernet.Repr(eth.dst, eth.src, 0x88CC, b"\x00" * 46).build()
    assert pretty.summarize(lldp) == "ethertype Unknown (0x88cc), length 60"
    assert pretty.summarize(b"\x00" * 12 + b"\x00\x2e" + b"\x00" * 46).startswith(
        "[ethernet: unsupported: 802.3 length field")


def test_arp_request_with_known_target_and_padding() -> None:
    frame = SAMPLE_FRAMES[0][:32] + MAC_B + SAMPLE_FRAMES[0][38:] + b"\x00" * 18
    assert pretty.summarize(frame) == (
        "ARP, Request who-has 10.0.0.2 (02:00:00:00:00:02) tell 10.0.0.1, length 46"
    )


def test_tcp_flags_sack_urgent_and_unknown_options() -> None:
    segment = tcp.Repr(1, 2, 10, 20, tcp.ACK | tcp.URG | tcp.ECE | tcp.CWR | tcp.RST, 100,
                       b"xy", urgent=1, sack_blocks=((100, 200), (300, 400)),
                       unknown_options=((99, b"\x01\x02"),))
    text = pretty.summarize(frame4(6, segment.build(src=A4, dst=B4)))
    assert text == (
        "IP 10.0.0.1.1 > 10.0.0.2.2: Flags [R.UEW], seq 10:12, ack 20, win 100, urg 1, "
        "options [nop,nop,sack 2 {100:200}{300:400},unknown-99 0x0102], length 2"
    )
    bare = tcp.Repr(1, 2, 0xFFFFFFFF, 0, 0, 0, b"abc").build(src=A4, dst=B4)
    assert pretty.summarize(frame4(6, bare)) == (
        "IP 10.0.0.1.1 > 10.0.0.2.2: Flags [none], seq 4294967295:2, win 0, length 3"
    )


def test_icmp_errors_name_the_quoted_flow() -> None:
    quoted = ipv4.Repr(B4, A4, ipv4.PROTO_UDP,
                       udp.Repr(5, 9999, b"").build(src=B4, dst=A4)).build()
    port = icmpv4.Repr.dest_unreachable(icmpv4.PORT_UNREACHABLE, quoted).build()
    assert pretty.summarize(frame4(1, port)) == (
        "IP 10.0.0.1 > 10.0.0.2: ICMP 10.0.0.1 udp port 9999 unreachable, length 36"
    )
    frag = icmpv4.Repr.frag_needed(1400, quoted).build()
    assert pretty.summarize(frame4(1, frag)).endswith(
        "ICMP 10.0.0.1 unreachable - need to frag (mtu 1400), length 36")
    ttl = icmpv4.Repr.time_exceeded(icmpv4.TTL_EXCEEDED, quoted).build()
    assert pretty.summarize(frame4(1, ttl)).endswith("ICMP time exceeded in-transit, length 36")
    redirect = bytes([5, 0, 0, 0]) + b"\x00" * 32
    assert pretty.summarize(frame4(1, redirect)).endswith("ICMP redirect, length 36")
    quoted6 = ipv6.Repr(B6, A6, ipv6.PROTO_TCP, tcp.Repr(80, 443, 0, 0, tcp.SYN, 0).build()
                        ).build()
    assert isinstance(quoted6, bytes)
    too_big = icmpv6.Repr.packet_too_big(1280, quoted6).build(src=A6, dst=B6)
    assert pretty.summarize(frame6(58, too_big)).endswith(
        "ICMP6, packet too big, mtu 1280, length 68")
    unreach = icmpv6.Repr.dest_unreachable(icmpv6.PORT_UNREACHABLE, quoted6).build(src=A6,
                                                                                  dst=B6)
    assert pretty.summarize(frame6(58, unreach)).endswith(
        "ICMP6, destination unreachable, unreachable port, 2001:db8::1 tcp port 443, length 68")
    record = icmpv6.McastRecord(icmpv6.CHANGE_TO_EXCLUDE, bytes.fromhex("ff02" + "00" * 13 + "16"))
    report = icmpv6.Repr.mldv2_report((record,)).build(src=A6, dst=B6)
    assert pretty.summarize(frame6(58, report, (ipv6.HopByHop(58),))) == (
        "IP6 2001:db8::1 > 2001:db8::2: HBH ICMP6, multicast listener report v2, "
        "1 group record(s), length 28")
    redirect6 = icmpv6.Repr(137, 0, data=bytes(4) + B6 + A6).build(src=A6, dst=B6)
    assert pretty.summarize(frame6(58, redirect6)).endswith(
        "ICMP6, redirect, 2001:db8::2 to 2001:db8::1, length 40")
    no_route = icmpv6.Repr.dest_unreachable(icmpv6.NO_ROUTE, quoted6).build(src=A6, dst=B6)
    assert pretty.summarize(frame6(58, no_route)).endswith(
        "ICMP6, destination unreachable, unreachable route 2001:db8::1, length 68")


def test_fragments_print_what_they_hold() -> None:
    later = frame4(17, b"\x00" * 16, ident=7, frag_offset=1480)
    assert pretty.summarize(later) == "IP 10.0.0.1 > 10.0.0.2: ip-proto-17"
    first = frame4(17, udp.Repr(1, 2, b"\x00" * 8).build(src=A4, dst=B4), ident=7,
                   more_fragments=True)
    expected = "IP 10.0.0.1.1 > 10.0.0.2.2: UDP, length 8"
    assert pretty.summarize(first, verify_checksums=True) == expected
    later6 = frame6(17, b"\x00" * 16, (ipv6.Fragment(17, offset=1232, more=False, ident=9),))
    assert pretty.summarize(later6) == "IP6 2001:db8::1 > 2001:db8::2: frag (1232|16)"
    echo = icmpv6.Repr.echo_request(1, 2, b"ping").build(src=A6, dst=B6)
    hbh = frame6(58, echo, (ipv6.HopByHop(58),))
    assert pretty.summarize(hbh) == (
        "IP6 2001:db8::1 > 2001:db8::2: HBH ICMP6, echo request, id 1, seq 2, length 12")
    syn = tcp.Repr(1, 2, 3, 4, tcp.SYN, 5).build(src=A6, dst=B6)
    dstopt = frame6(6, syn, (ipv6.DestinationOptions(6),))
    assert pretty.summarize(dstopt) == (
        "IP6 2001:db8::1 > 2001:db8::2: DSTOPT 1 > 2: Flags [S], seq 3, win 5, length 0")
    first6 = frame6(17, udp.Repr(1, 2, b"\x00" * 8).build(src=A6, dst=B6),
                    (ipv6.Fragment(17, offset=0, more=True, ident=9),))
    assert pretty.summarize(first6) == (
        "IP6 2001:db8::1 > 2001:db8::2: frag (0|16) 1 > 2: UDP, length 8")


def test_undecodable_layers_name_the_wire_error() -> None:
    assert pretty.summarize(SAMPLE_FRAMES[2][:40]).startswith("[ip: truncated: ")
    expected = "ARP, [arp: truncated: ARP needs 28 bytes, got 6]"
    assert pretty.summarize(SAMPLE_FRAMES[0][:20]) == expected
    bad_offset = bytearray(SAMPLE_FRAMES[4])
    bad_offset[14 + 20 + 12] = 0x30  # data offset 3 words
    ip = ipv4.Repr.parse(bytes(bad_offset)[14:])
    repaired = frame4(6, bytes(ip.payload), ident=1, dont_fragment=True)
    assert pretty.summarize(repaired) == (
        "IP 10.0.0.1 > 10.0.0.2: [tcp: bad-data-offset: TCP data offset 3 < 5]")
    short_udp = frame4(17, b"\x00\x01\x00\x02\x00\x20\x00\x00")
    assert pretty.summarize(short_udp).startswith("IP 10.0.0.1 > 10.0.0.2: [udp: truncated")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_mangled_sample_frames_always_give_a_line(data: st.DataObject) -> None:
    frame = bytearray(data.draw(st.sampled_from(SAMPLE_FRAMES)))
    for _ in range(data.draw(st.integers(1, 3))):
        frame[data.draw(st.integers(0, len(frame) - 1))] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(frame)))
    for candidate in (bytes(frame), bytes(frame[:cut])):
        for verify in (False, True):
            text = pretty.summarize(candidate, LINKTYPE_ETHERNET, verify_checksums=verify)
            assert text and "\n" not in text
            text = pretty.summarize(candidate[14:], LINKTYPE_RAW, verify_checksums=verify)
            assert text and "\n" not in text


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=120), st.sampled_from([LINKTYPE_ETHERNET, LINKTYPE_RAW]))
def test_arbitrary_bytes_always_give_a_line(blob: bytes, linktype: int) -> None:
    for prefix in (b"", b"\x45\x00", b"\x60\x00\x00\x00"):
        assert pretty.summarize(prefix + blob, linktype, verify_checksums=True)


def test_pcap_written_by_decode_users_round_trips_through_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "raw.pcap"
    with PcapWriter(path, linktype=LINKTYPE_RAW, nanosecond=True) as writer:
        writer.write(1_000_000_123_456_789, SAMPLE_FRAMES[14][14:])
    status, out, _ = decode(capsys, str(path))
    assert (status, out) == (
        0, "1000000.123456 IP 10.0.0.1.40000 > 10.0.0.2.9999: UDP, length 13\n")
