"""Captures: pcap writer, pcap/pcapng reader, and tshark's opinion of what we write."""

from __future__ import annotations

import importlib.util
import io
import shutil
import struct
import subprocess
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rcunet.link import pcap
from rcunet.link.pcap import LINKTYPE_ETHERNET, LINKTYPE_RAW, PcapError, PcapWriter, Record

ROOT = Path(__file__).resolve().parents[2]
FRAMES = [b"\x01" * 60, b"\x02" * 1514, b"", b"\x03\x04\x05"]
TIMES = [0, 1_700_000_000_123_456_000, 1_700_000_001_000_001_000, 4_294_967_295_999_999_000]


def written(frames: list[bytes], times: list[int], **kwargs: object) -> bytes:
    out = io.BytesIO()
    writer = PcapWriter(out, **kwargs)  # type: ignore[arg-type]
    for now, frame in zip(times, frames, strict=True):
        writer.write(now, frame)
    writer.close()
    return out.getvalue()


# ------------------------------------------------------------------ classic round trip


def test_round_trip_microseconds_keeps_frames_and_times() -> None:
    records = pcap.read_all(written(FRAMES, TIMES))
    assert [r.frame for r in records] == FRAMES
    assert [r.timestamp_ns for r in records] == TIMES
    assert [r.orig_len for r in records] == [len(f) for f in FRAMES]
    assert {r.linktype for r in records} == {LINKTYPE_ETHERNET}


def test_microsecond_file_drops_sub_microsecond_digits() -> None:
    records = pcap.read_all(written([b"x"], [1_000_000_999]))
    assert records[0].timestamp_ns == 1_000_000_000


def test_round_trip_nanoseconds_is_exact_and_uses_nano_magic() -> None:
    times = [1, 1_700_000_000_123_456_789]
    data = written([b"a", b"b"], times, nanosecond=True, linktype=LINKTYPE_RAW)
    assert struct.unpack_from("<I", data)[0] == pcap.MAGIC_NANO
    records = pcap.read_all(data)
    assert [r.timestamp_ns for r in records] == times
    assert records[0].linktype == LINKTYPE_RAW


def test_round_trip_through_a_path(tmp_path: Path) -> None:
    path = tmp_path / "x.pcap"
    with PcapWriter(path) as writer:
        writer.write(TIMES[1], FRAMES[1])
    assert pcap.read_all(path) == [Record(TIMES[1], FRAMES[1], LINKTYPE_ETHERNET, 1514)]
    assert pcap.read_all(str(path)) == pcap.read_all(path.read_bytes())


def test_snaplen_cuts_frames_and_keeps_the_wire_length() -> None:
    records = pcap.read_all(written([b"\xaa" * 100], [0], snaplen=64))
    assert records[0].frame == b"\xaa" * 64
    assert records[0].orig_len == 100


def test_writer_rejects_bad_arguments_and_writes_after_close() -> None:
    with pytest.raises(ValueError):
        PcapWriter(io.BytesIO(), snaplen=0)
    with pytest.raises(ValueError):
        PcapWriter(io.BytesIO(), snaplen=pcap.MAX_SNAPLEN + 1)
    writer = PcapWriter(io.BytesIO())
    with pytest.raises(ValueError):
        writer.write(-1, b"x")
    with pytest.raises(ValueError):
        writer.write(2**32 * 1_000_000_000, b"x")
    writer.close()
    with pytest.raises(ValueError, match="closed"):
        writer.write(0, b"x")


def test_concurrent_writers_never_interleave_records() -> None:
    out = io.BytesIO()
    writer = PcapWriter(out)
    threads_n, per_thread = 4, 300

    def append(tid: int) -> None:
        for i in range(per_thread):
            # Sizes differ per record so that an interleaved header/data pair would
            # break the framing of everything after it.
            writer.write(tid * 1_000_000 + i * 1000, bytes([tid]) * (1 + (i * 7 + tid) % 200))

    threads = [threading.Thread(target=append, args=(t,)) for t in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    writer.close()
    records = pcap.read_all(out.getvalue())
    assert len(records) == threads_n * per_thread
    seen = set()
    for record in records:
        assert record.timestamp_ns is not None
        tid, rest = divmod(record.timestamp_ns, 1_000_000)
        i = rest // 1000
        assert record.frame == bytes([tid]) * (1 + (i * 7 + tid) % 200)
        seen.add((tid, i))
    assert len(seen) == threads_n * per_thread


def test_reads_big_endian_classic_pcap() -> None:
    header = struct.pack(">IHHiIII", pcap.MAGIC_MICRO, 2, 4, 0, 0, 65535, 101)
    record = struct.pack(">IIII", 10, 20, 3, 5) + b"abc"
    assert pcap.read_all(header + record) == [Record(10_000_020_000, b"abc", 101, 5)]
    nano = struct.pack(">IHHiIII", pcap.MAGIC_NANO, 2, 4, 0, 0, 65535, 1)
    assert pcap.read_all(nano + record)[0].timestamp_ns == 10_000_000_020


# ------------------------------------------------------------------ pcapng


def block(endian: str, block_type: int, body: bytes) -> bytes:
    body += b"\x00" * (-len(body) % 4)
    total = 12 + len(body)
    return struct.pack(endian + "II", block_type, total) + body + struct.pack(endian + "I", total)


def option(endian: str, code: int, value: bytes) -> bytes:
    return struct.pack(endian + "HH", code, len(value)) + value + b"\x00" * (-len(value) % 4)


def shb(endian: str, options: bytes = b"") -> bytes:
    body = struct.pack(endian + "IHHq", 0x1A2B3C4D, 1, 0, -1) + options
    return block(endian, 0x0A0D0D0A, body)


def idb(endian: str, linktype: int, snaplen: int, options: bytes = b"") -> bytes:
    return block(endian, 1, struct.pack(endian + "HHI", linktype, 0, snaplen) + options)


def epb(endian: str, iface: int, units: int, frame: bytes, orig_len: int | None = None) -> bytes:
    head = struct.pack(
        endian + "IIIII", iface, units >> 32, units & 0xFFFFFFFF, len(frame),
        len(frame) if orig_len is None else orig_len,
    )
    return block(endian, 6, head + frame)


def spb(endian: str, frame: bytes) -> bytes:
    return block(endian, 3, struct.pack(endian + "I", len(frame)) + frame)


END = b"\x00\x00\x00\x00"


def pcapng_fixture() -> bytes:
    """Two sections: little-endian (ns resolution, an unknown block, EPB and SPB), then
    big-endian (default µs resolution on a raw-IP interface, 2^-10 s on another)."""
    le, be = "<", ">"
    first = (
        shb(le, option(le, 4, b"rcunet test") + END)
        + idb(le, 1, 0, option(le, 2, b"eth0") + option(le, 9, b"\x09") + END)
        + block(le, 0x0BAD, b"unknown block body")
        + epb(le, 0, 1_700_000_000_123_456_789, b"frame-1", orig_len=1000)
        + block(le, 5, b"\x00" * 12)  # an Interface Statistics Block: skipped too
        + spb(le, b"frame-2")
    )
    second = (
        shb(be)
        + idb(be, 101, 65535)
        + idb(be, 1, 65535, option(be, 9, b"\x8a") + END)
        + epb(be, 0, 1_000_002, b"frame-3")
        + epb(be, 1, 3 * 1024 + 512, b"frame-4")
    )
    return first + second


PCAPNG_RECORDS = [
    Record(1_700_000_000_123_456_789, b"frame-1", 1, 1000, 0),
    Record(None, b"frame-2", 1, 7, 0),
    Record(1_000_002_000, b"frame-3", 101, 7, 0),
    Record(3_500_000_000, b"frame-4", 1, 7, 1),
]


def test_pcapng_sections_byte_orders_and_block_kinds() -> None:
    assert pcap.read_all(pcapng_fixture()) == PCAPNG_RECORDS


def test_pcapng_tsoffset_and_decimal_resolutions() -> None:
    le = "<"
    data = (
        shb(le)
        + idb(le, 1, 0, option(le, 14, struct.pack("<q", 100)) + END)  # µs, +100 s
        + idb(le, 1, 0, option(le, 9, b"\x0c") + END)  # picoseconds
        + epb(le, 0, 5, b"a")
        + epb(le, 1, 7_000_123, b"b")
    )
    records = pcap.read_all(data)
    assert [r.timestamp_ns for r in records] == [100_000_005_000, 7_000]


def test_pcapng_packet_on_undefined_interface_is_an_error() -> None:
    data = shb("<") + epb("<", 0, 0, b"x")
    with pytest.raises(PcapError, match="interface 0") as info:
        pcap.read_all(data)
    assert info.value.offset == 28 + 8


# ------------------------------------------------------------------ corrupt input


def test_empty_and_foreign_files_are_rejected_at_offset_zero(tmp_path: Path) -> None:
    for data in (b"", b"\xd4\xc3", b"GIF89a....", b"\x00" * 24):
        with pytest.raises(PcapError) as info:
            pcap.read_all(data)
        assert info.value.offset == 0
        assert "at offset 0" in str(info.value)


def test_truncated_record_names_its_offset() -> None:
    data = written([b"\x01" * 60, b"\x02" * 60], [0, 1000])
    with pytest.raises(PcapError, match="truncated pcap record data") as info:
        pcap.read_all(data[:-10])
    assert info.value.offset == 24 + 76 + 16
    with pytest.raises(PcapError, match="truncated pcap record header") as info:
        pcap.read_all(data[: 24 + 76 + 5])
    assert info.value.offset == 24 + 76


def test_absurd_record_length_is_refused_without_allocating() -> None:
    header = written([], [])
    bad = header + struct.pack("<IIII", 0, 0, 0xFFFFFFF0, 0xFFFFFFF0)
    with pytest.raises(PcapError, match="implausible") as info:
        pcap.read_all(bad)
    assert info.value.offset == 24


def test_pcapng_mismatched_trailer_and_bad_lengths() -> None:
    good = pcapng_fixture()
    # Trailing length of the IDB (which starts right after the 48-byte SHB).
    shb_len = struct.unpack_from("<I", good, 4)[0]
    idb_len = struct.unpack_from("<I", good, shb_len + 4)[0]
    broken = bytearray(good)
    struct.pack_into("<I", broken, shb_len + idb_len - 4, idb_len + 4)
    with pytest.raises(PcapError, match="trailing length") as info:
        pcap.read_all(bytes(broken))
    assert info.value.offset == shb_len + idb_len - 4
    odd = bytearray(good)
    struct.pack_into("<I", odd, shb_len + 4, 13)
    with pytest.raises(PcapError, match="block length 13") as info:
        pcap.read_all(bytes(odd))
    assert info.value.offset == shb_len + 4
    bom = bytearray(good)
    bom[8:12] = b"\x00\x11\x22\x33"
    with pytest.raises(PcapError, match="byte-order magic") as info:
        pcap.read_all(bytes(bom))
    assert info.value.offset == 8


@pytest.mark.parametrize("kind", ["pcap", "pcapng"])
def test_every_truncation_is_a_prefix_or_a_pcap_error(kind: str) -> None:
    data = written(FRAMES, TIMES) if kind == "pcap" else pcapng_fixture()
    full = pcap.read_all(data)
    for cut in range(len(data)):
        try:
            records = pcap.read_all(data[:cut])
        except PcapError as exc:
            assert 0 <= exc.offset <= cut
        else:
            assert records == full[: len(records)]


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_corrupted_bytes_raise_only_pcap_error(data: st.DataObject) -> None:
    original = bytearray(data.draw(st.sampled_from([written(FRAMES, TIMES), pcapng_fixture()])))
    for _ in range(data.draw(st.integers(1, 4))):
        index = data.draw(st.integers(0, len(original) - 1))
        original[index] = data.draw(st.integers(0, 255))
    try:
        pcap.read_all(bytes(original))
    except PcapError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_raise_only_pcap_error(blob: bytes) -> None:
    for data in (blob, b"\xd4\xc3\xb2\xa1" + blob, b"\x0a\x0d\x0d\x0a" + blob):
        try:
            pcap.read_all(data)
        except PcapError:
            pass


# ------------------------------------------------------------------ tshark


def load_make_samples():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("make_samples", ROOT / "samples/make_samples.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.fail("tshark is not installed: ./scripts/test installs it (apt-get install tshark)")
    return path


CHECKSUM_PREFS = [
    "-o", "ip.check_checksum:TRUE",
    "-o", "tcp.check_checksum:TRUE",
    "-o", "udp.check_checksum:TRUE",
]


def run_tshark(*args: str) -> str:
    result = subprocess.run(
        [tshark(), *CHECKSUM_PREFS, *args], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    # tshark warns on stderr about running as root; anything else there is a complaint.
    complaints = [
        line for line in result.stderr.splitlines()
        if line.strip() and "Running as user" not in line and "dangerous" not in line
    ]
    assert complaints == []
    return result.stdout


def assert_tshark_clean(path: Path, frames: int) -> None:
    expert = run_tshark("-r", str(path), "-z", "expert", "-q")
    # The expert summary lists Errors and Warnings sections only when there are any.
    for word in ("Errors", "Warnings", "Malformed", "Bad checksum", "Error/"):
        assert word not in expert, expert
    verbose = run_tshark("-r", str(path), "-V")
    for word in ("malformed", "bad checksum", "[expert info (warning", "[expert info (error",
                 "incorrect", "status: bad"):
        assert word not in verbose.lower(), word
    assert verbose.count("\nFrame ") + verbose.startswith("Frame ") == frames


def test_tshark_reads_our_sample_capture_without_complaint(tmp_path: Path) -> None:
    make_samples = load_make_samples()
    path = tmp_path / "handshake.pcap"
    count = make_samples.write_handshake(path)
    assert_tshark_clean(path, count)


def test_tshark_reads_nanosecond_raw_ip_capture(tmp_path: Path) -> None:
    make_samples = load_make_samples()
    path = tmp_path / "raw.pcap"
    frames = [frame[14:] for _, frame in make_samples.handshake_frames() if frame[12:14] in
              (b"\x08\x00", b"\x86\xdd")]
    with PcapWriter(path, linktype=LINKTYPE_RAW, nanosecond=True) as writer:
        for i, frame in enumerate(frames):
            writer.write(1_700_000_000_000_000_001 + i, frame)
    assert_tshark_clean(path, len(frames))
    fields = run_tshark("-r", str(path), "-T", "fields", "-e", "frame.time_epoch")
    assert fields.splitlines()[0].startswith("1700000000.000000001")


def test_pcapng_written_by_tshark_reads_back_identically(tmp_path: Path) -> None:
    ours = tmp_path / "handshake.pcap"
    load_make_samples().write_handshake(ours)
    theirs = tmp_path / "handshake.pcapng"
    result = subprocess.run([tshark(), "-r", str(ours), "-F", "pcapng", "-w", str(theirs)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert theirs.read_bytes()[:4] == b"\x0a\x0d\x0d\x0a"
    assert pcap.read_all(theirs) == pcap.read_all(ours)
