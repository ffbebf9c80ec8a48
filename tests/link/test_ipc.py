"""The inter-process link (rcunet/link/ipc.py), both transports, both ends in this
process (tests/host/test_host_procs.py runs them across processes): frames keep their
bytes and order, bad input is a counted drop, impairments and taps work, checksum
offload follows the in-memory rule, a closed peer takes the link down."""

from __future__ import annotations

import io
import threading

import pytest

from rcunet.link.impair import ImpairmentConfig
from rcunet.link.ipc import IpcEndpoint, ipc_pair
from rcunet.link.pcap import PcapWriter, read_all
from rcunet.sync.hooks import wait_until

TRANSPORTS = ["seqpacket", "ring"]


class Collector:
    def __init__(self, expected: int) -> None:
        self.frames: list[bytes] = []
        self.expected = expected
        self.done = threading.Event()

    def __call__(self, frame: bytes) -> None:
        self.frames.append(frame)
        if len(self.frames) >= self.expected:
            self.done.set()


def started(transport: str, **options: object) -> tuple[IpcEndpoint, IpcEndpoint]:
    a, b = ipc_pair(transport=transport, **options)  # type: ignore[arg-type]
    a.start()
    b.start()
    return a, b


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_frames_keep_their_bytes_and_order(transport: str) -> None:
    a, b = started(transport)
    try:
        frames = [i.to_bytes(4, "big") + bytes([i % 251]) * (14 + i % 1400)
                  for i in range(3000)]
        got = Collector(len(frames))
        b.set_receiver(got)
        for frame in frames:
            assert a.send(frame)
        assert got.done.wait(30)
        assert got.frames == frames
        assert b.stats()["rx_packets"] == len(frames) == a.stats()["tx_packets"]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_frame_over_the_mtu_is_a_counted_drop(transport: str) -> None:
    a, b = started(transport, mtu=1500)
    try:
        got = Collector(1)
        b.set_receiver(got)
        assert not a.send(bytes(1500 + 18 + 1))  # past MTU + an 802.1Q header
        assert not a.send(bytes(10))  # a runt: shorter than an Ethernet header
        assert a.send(bytes(1500 + 18))
        assert got.done.wait(10)
        assert len(got.frames[0]) == 1518
        stats = a.stats()
        assert stats["mtu_drops"] == 2 and stats["tx_dropped"] == 2
    finally:
        a.close()
        b.close()


def test_a_torn_or_oversized_message_is_a_counted_drop() -> None:
    """Something other than a well-behaved end wrote a message longer than any frame
    the link carries: the receiver counts it and carries on."""
    a, b = started("seqpacket", mtu=1500)
    try:
        got = Collector(1)
        b.set_receiver(got)
        raw = a.transport.sock  # type: ignore[union-attr]
        raw.send(bytes(5000))  # bypasses the sender's MTU check
        assert a.send(b"\x01" * 60)
        assert got.done.wait(10)
        assert got.frames == [b"\x01" * 60]
        assert b.stats()["rx_length_errors"] == 1
        assert b.stats()["rx_dropped"] == 1
    finally:
        a.close()
        b.close()


def test_a_corrupt_ring_record_is_a_counted_drop() -> None:
    a, b = ipc_pair(transport="ring", mtu=1500)
    try:
        ring = a.transport.tx  # type: ignore[union-attr]
        assert ring.produce(b"\x02" * 64) is not None
        ring.map[ring.data + 4:ring.data + 8] = b"junk"  # the record's magic, torn
        got = Collector(1)
        b.set_receiver(got)
        b.start()
        a.start()
        assert a.send(b"\x03" * 64)
        assert got.done.wait(10)
        assert got.frames == [b"\x03" * 64]
        assert b.stats()["rx_length_errors"] == 1
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_impairments_apply_and_turn_checksum_offload_off(transport: str) -> None:
    clean_a, clean_b = ipc_pair(transport=transport)
    assert clean_a.checksum_offload and clean_b.checksum_offload
    clean_a.close()
    clean_b.close()
    a, b = started(transport, impair_ab=ImpairmentConfig(loss=1.0, seed=1))
    try:
        # an impairment in either direction: neither end may skip checksums
        assert not a.checksum_offload and not b.checksum_offload
        for _ in range(50):
            a.send(bytes(100))
        got = Collector(1)
        a.set_receiver(got)
        b.send(bytes(100))  # b->a is clean
        assert got.done.wait(10)
        assert a.stats()["lost"] == 50
        assert b.stats()["rx_packets"] == 0
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_delayed_frames_are_released_on_time_by_the_sender(transport: str) -> None:
    a, b = started(transport, impair_ab=ImpairmentConfig(delay=20_000_000, seed=1))
    try:
        got = Collector(5)
        b.set_receiver(got)
        for i in range(5):
            a.send(bytes([i]) * 60)
        assert got.done.wait(10)
        assert [f[0] for f in got.frames] == [0, 1, 2, 3, 4]
        assert a.stats()["delayed"] == 5
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_tap_sees_what_an_end_sends_and_receives(transport: str) -> None:
    a, b = started(transport)
    try:
        buffer = io.BytesIO()
        a.tap = PcapWriter(buffer)
        got = Collector(1)
        b.set_receiver(got)
        echoed = Collector(1)
        a.set_receiver(echoed)
        a.send(b"\x04" * 60)
        assert got.done.wait(10)
        b.send(b"\x05" * 60)
        assert echoed.done.wait(10)
        records = read_all(buffer.getvalue())
        assert [r.frame for r in records] == [b"\x04" * 60, b"\x05" * 60]
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_closing_one_end_takes_the_link_down(transport: str) -> None:
    a, b = started(transport)
    went_down = threading.Event()
    reasons: list[str] = []
    b.on_down = lambda reason: (reasons.append(reason), went_down.set())
    a.close()
    assert went_down.wait(10)
    assert b.down is not None and reasons == [b.down]
    assert not b.send(bytes(60))
    assert b.stats()["tx_carrier_errors"] == 1
    b.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_send_after_or_during_close_is_a_counted_drop(transport: str) -> None:
    """A Host thread may still send (a timer's retransmission, a late writer) while its
    link end closes: a counted drop, never an exception out of the thread, and never a
    write to a descriptor number the close gave back (another file may have it now)."""
    a, b = started(transport)
    errors: list[BaseException] = []
    begun = threading.Barrier(5)

    def keep_sending() -> None:
        begun.wait()
        try:
            for _ in range(2000):
                a.send(bytes(60))
        except BaseException as exc:  # noqa: BLE001 - the test's verdict
            errors.append(exc)

    senders = [threading.Thread(target=keep_sending) for _ in range(4)]
    for sender in senders:
        sender.start()
    begun.wait()
    a.close()
    for sender in senders:
        sender.join()
    assert errors == []
    assert not a.send(bytes(60))
    stats = a.stats()
    assert stats["tx_dropped"] >= 1 and stats["tx_carrier_errors"] >= 1
    b.close()


def test_closing_a_ring_waits_out_a_call_inside_its_mapping() -> None:
    """A thread inside pack_into/unpack_from holds an export of the mapping (on a
    free-threaded build nothing orders that call with close()): close waits for it to
    end and then unmaps, rather than leave the mapping and its descriptor open until
    the object is collected."""
    a, b = ipc_pair(transport="ring")
    inside = memoryview(a.transport.rx.map)  # what a call in progress holds
    closer = threading.Thread(target=a.close)
    closer.start()
    wait_until(lambda: a.transport._closed, what="close() to begin")
    assert not a.transport.rx.map.closed  # it cannot unmap under the call...
    inside.release()  # ...which ends
    closer.join(10)
    assert not closer.is_alive()
    assert a.transport.rx.map.closed and a.transport.tx.map.closed
    b.close()


def test_unknown_transport_and_bad_mtu_are_refused() -> None:
    with pytest.raises(ValueError, match="transport"):
        ipc_pair(transport="pipe")
    with pytest.raises(ValueError, match="MTU"):
        ipc_pair(mtu=40)


@pytest.mark.usefixtures("unguarded_spin")
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("rx_spin", [0.0, 0.05])
def test_a_spinning_receive_thread_takes_what_comes_during_its_spin(
        transport: str, rx_spin: float) -> None:
    """Ping-pong: each end answers a frame from its receive thread, so every frame after
    the first arrives while the other end's receive thread has just delivered one.  A
    spinning thread (50 ms: far longer than an answer takes, whatever the load, and a
    spin that never gives up its CPU) finds
    them by polling on; one that does not spin sleeps and never counts a spin hit.
    Either way every frame arrives, in order."""
    a, b = started(transport, rx_spin=rx_spin)
    rounds = 200
    try:
        got_a = Collector(rounds)

        def echo(frame: bytes) -> None:
            b.send(frame)

        b.set_receiver(echo)

        def bounce(frame: bytes) -> None:
            got_a(frame)
            if len(got_a.frames) < rounds:
                a.send(len(got_a.frames).to_bytes(4, "big") + bytes(56))

        a.set_receiver(bounce)
        assert a.send((0).to_bytes(4, "big") + bytes(56))
        assert got_a.done.wait(60)
        assert [int.from_bytes(f[:4], "big") for f in got_a.frames] == list(range(rounds))
        hits = a.stats()["spin_hits"] + b.stats()["spin_hits"]
        assert (hits > 0) if rx_spin else (hits == 0)
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_closing_an_end_ends_its_receive_threads_spin(transport: str) -> None:
    """A wake-up ends a spin early (a spinning ring consumer looks at its poller every
    few looks at the ring): closing an end whose receive thread is in a 600 s spin
    leaves no thread of it running long before the spin would end."""
    a, b = started(transport, rx_spin=600.0)
    try:
        got = Collector(1)
        a.set_receiver(got)
        assert b.send(bytes(60))
        assert got.done.wait(60)  # a's receive thread delivered it, and now spins
        a.close()
        wait_until(lambda: not any(thread.is_alive() for thread in a._threads),
                   timeout=120, what="a's threads to end")
    finally:
        a.close()
        b.close()


def test_a_negative_spin_is_refused() -> None:
    with pytest.raises(ValueError, match="rx_spin"):
        ipc_pair(rx_spin=-1.0)
