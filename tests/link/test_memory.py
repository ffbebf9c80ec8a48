"""In-memory links: delivery sets on a learning switch, MTU drops, inline vs queued
delivery, impairments on virtual time, the worker thread, taps, and concurrent senders
with every frame accounted for."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time
from collections import deque

import pytest

from rcunet.link.impair import MS, Impairment
from rcunet.link.memory import CLEAN_BEFORE_LOCK, KIND_IP, Endpoint, PointToPoint, Segment
from rcunet.sync import hooks

BROADCAST = b"\xff" * 6
MCAST = bytes.fromhex("01005e000001")


class FakeClock:
    def __init__(self) -> None:
        self.t = 1_000_000_000

    def now(self) -> int:
        return self.t


class Inbox:
    """A receiver that records frames; deque.append is atomic, so senders on several
    threads can deliver into it at once."""

    def __init__(self) -> None:
        self.frames: deque[bytes] = deque()

    def __call__(self, frame: bytes) -> None:
        self.frames.append(frame)

    def take(self) -> list[bytes]:
        out = list(self.frames)
        self.frames.clear()
        return out


class Recorder:
    def __init__(self) -> None:
        self.records: deque[tuple[int, bytes]] = deque()

    def write(self, timestamp_ns: int, frame: bytes) -> None:
        self.records.append((timestamp_ns, frame))


def mac(n: int) -> bytes:
    return bytes([2, 0, 0, 0, 0, n])


def eth(dst: bytes, src: bytes, payload: bytes = b"x" * 46) -> bytes:
    return dst + src + b"\x08\x00" + payload


def wired(endpoints: list[Endpoint]) -> list[Inbox]:
    inboxes = []
    for endpoint in endpoints:
        inbox = Inbox()
        endpoint.set_receiver(inbox)
        inboxes.append(inbox)
    return inboxes


# -- point to point -------------------------------------------------------------------------


def test_point_to_point_inline_both_ways() -> None:
    link = PointToPoint()
    ia, ib = wired([link.a, link.b])
    frame = eth(mac(2), mac(1))
    assert link.a.send(frame)
    assert ib.take() == [frame] and ia.take() == []
    assert link.b.send(memoryview(frame))
    assert ia.take() == [frame]
    assert link.a.stats()["tx_packets"] == 1 and link.b.stats()["rx_packets"] == 1
    assert link.b.stats()["rx_bytes"] == len(frame)


def test_queued_delivery_waits_for_pump_and_keeps_order() -> None:
    link = PointToPoint(KIND_IP, deliver_inline=False)
    (ib,) = wired([link.b])
    sent = [bytes([0x45]) + bytes([i]) * 40 for i in range(100)]
    for frame in sent:
        link.a.send(frame)
    assert ib.take() == [] and link.pending() == 100
    assert link.pump(limit=30) == 30
    assert link.pump() == 70
    assert ib.take() == sent and link.pending() == 0


def test_backlog_overflow_counts_rx_dropped() -> None:
    link = PointToPoint(KIND_IP, deliver_inline=False, backlog=10)
    wired([link.b])
    for _ in range(15):
        link.a.send(b"\x45" * 30)
    assert link.pump() == 10
    assert link.b.stats()["rx_dropped"] == 5 and link.stats()["backlog_drops"] == 5


def test_no_receiver_is_a_counted_drop() -> None:
    link = PointToPoint()
    link.a.send(eth(mac(2), mac(1)))
    assert link.b.stats()["rx_dropped"] == 1 and link.stats()["no_receiver"] == 1


def test_receiver_may_send_on_the_same_link_inline() -> None:
    """The link's lock is not held while a receiver runs: an echo does not deadlock."""
    link = PointToPoint()
    ia = Inbox()
    link.a.set_receiver(ia)
    link.b.set_receiver(lambda frame: link.b.send(frame[6:12] + frame[0:6] + frame[12:]))
    link.a.send(eth(mac(2), mac(1)))
    assert ia.take() == [eth(mac(1), mac(2))]


# -- MTU -----------------------------------------------------------------------------------


def test_mtu_drops_ethernet_and_vlan_and_ip() -> None:
    link = PointToPoint(mtu=1500)
    (ib,) = wired([link.b])
    assert link.a.send(eth(mac(2), mac(1), bytes(1500)))
    assert not link.a.send(eth(mac(2), mac(1), bytes(1501)))
    tagged = mac(2) + mac(1) + b"\x81\x00\x00\x05\x08\x00" + bytes(1500)
    assert link.a.send(tagged)
    assert not link.a.send(b"\x00" * 13)  # runt
    assert len(ib.take()) == 2
    stats = link.stats()
    assert stats["mtu_drops"] == 1 and stats["runts"] == 1
    assert link.a.stats()["tx_dropped"] == 2
    ip = PointToPoint(KIND_IP, mtu=9000)
    assert ip.a.send(bytes(9000)) and not ip.a.send(bytes(9001))
    assert ip.a.mtu == 9000 and ip.a.kind == KIND_IP


def test_bad_configuration_rejected() -> None:
    with pytest.raises(ValueError):
        PointToPoint(mtu=67)
    with pytest.raises(ValueError):
        Segment("token-ring")
    with pytest.raises(ValueError):
        Segment().add_endpoint(mac=b"\x01")


# -- switched segment ------------------------------------------------------------------------


def test_switch_floods_unknown_then_forwards_after_learning() -> None:
    seg = Segment()
    eps = [seg.add_endpoint(f"h{i}", mac(i)) for i in range(4)]
    boxes = wired(eps)
    first = eth(mac(1), mac(0))
    eps[0].send(first)  # mac(1) unknown: flood
    assert [len(b.take()) for b in boxes] == [0, 1, 1, 1]
    eps[1].send(eth(mac(0), mac(1)))  # mac(0) learned from the first frame
    assert [len(b.take()) for b in boxes] == [1, 0, 0, 0]
    eps[0].send(first)  # now mac(1) is known too
    assert [len(b.take()) for b in boxes] == [0, 1, 0, 0]
    assert seg.fdb() == {mac(0): "h0", mac(1): "h1"}
    stats = seg.stats()
    assert stats["flooded"] == 1 and stats["forwarded"] == 2


def test_switch_broadcast_and_multicast_reach_all_but_sender() -> None:
    seg = Segment()
    eps = [seg.add_endpoint(mac=mac(i)) for i in range(5)]
    boxes = wired(eps)
    eps[2].send(eth(BROADCAST, mac(2)))
    assert [len(b.take()) for b in boxes] == [1, 1, 0, 1, 1]
    eps[4].send(eth(MCAST, mac(4)))
    assert [len(b.take()) for b in boxes] == [1, 1, 1, 1, 0]


def test_switch_filters_frames_for_the_ingress_port_and_never_learns_multicast_sources() -> None:
    seg = Segment()
    eps = [seg.add_endpoint(mac=mac(i)) for i in range(3)]
    boxes = wired(eps)
    eps[0].send(eth(BROADCAST, mac(0)))
    boxes[1].take(), boxes[2].take()
    eps[0].send(eth(mac(0), mac(9)))  # to a MAC learned on the ingress port
    assert [len(b.take()) for b in boxes] == [0, 0, 0] and seg.stats()["filtered"] == 1
    eps[1].send(eth(mac(5), MCAST))
    assert MCAST not in seg.fdb()


def test_switch_forwards_only_within_a_ports_vlan() -> None:
    """Ports 0 and 1 in VLAN 2, ports 2 and 3 left in VLAN 1: broadcasts and learned
    unicast stay within the sender's VLAN; back in one VLAN, all reach each other."""
    seg = Segment()
    eps = [seg.add_endpoint(mac=mac(i)) for i in range(4)]
    boxes = wired(eps)
    for i in range(4):  # every station learned while the switch is one VLAN
        eps[i].send(eth(BROADCAST, mac(i)))
    for box in boxes:
        box.take()
    seg.set_vlans({eps[0]: 2, eps[1]: 2})
    assert (seg.vlan_of(eps[0]), seg.vlan_of(eps[3])) == (2, 1)
    eps[0].send(eth(BROADCAST, mac(0)))
    assert [len(b.take()) for b in boxes] == [0, 1, 0, 0]
    eps[0].send(eth(mac(2), mac(0)))  # learned on a VLAN 1 port: flooded in VLAN 2
    assert [len(b.take()) for b in boxes] == [0, 1, 0, 0]
    eps[3].send(eth(mac(2), mac(3)))
    assert [len(b.take()) for b in boxes] == [0, 0, 1, 0]
    seg.set_vlans({})
    eps[0].send(eth(mac(2), mac(0)))
    assert [len(b.take()) for b in boxes] == [0, 0, 1, 0]
    with pytest.raises(ValueError):
        seg.set_vlans({Segment().add_endpoint(mac=mac(9)): 2})


def test_switch_relearns_moved_station_and_ages_entries() -> None:
    clock = FakeClock()
    seg = Segment(clock=clock, fdb_ageing=300 * 10**9)
    eps = [seg.add_endpoint(mac=mac(i)) for i in range(3)]
    boxes = wired(eps)
    eps[1].send(eth(BROADCAST, mac(7)))
    eps[2].send(eth(BROADCAST, mac(7)))  # the station moved to port 2
    for b in boxes:
        b.take()
    eps[0].send(eth(mac(7), mac(0)))
    assert [len(b.take()) for b in boxes] == [0, 0, 1]
    clock.t += 301 * 10**9
    eps[0].send(eth(mac(7), mac(0)))  # aged out: flood again
    assert [len(b.take()) for b in boxes] == [0, 1, 1]


def test_switch_fdb_is_bounded() -> None:
    seg = Segment(fdb_max=8)
    eps = [seg.add_endpoint() for _ in range(2)]
    wired(eps)
    for i in range(50):
        eps[0].send(eth(BROADCAST, bytes([2, 0, 0, 0, 1, i])))
    assert len(seg.fdb()) == 8


def test_ip_segment_is_a_hub() -> None:
    seg = Segment(KIND_IP)
    eps = [seg.add_endpoint() for _ in range(3)]
    boxes = wired(eps)
    eps[1].send(b"\x60" + bytes(50))
    assert [len(b.take()) for b in boxes] == [1, 0, 1]


# -- checksum offload and taps ---------------------------------------------------------------


def test_checksum_offload_only_on_clean_links() -> None:
    assert PointToPoint().a.checksum_offload
    assert not PointToPoint(checksum_offload=False).a.checksum_offload
    assert PointToPoint(impair_ab=Impairment()).b.checksum_offload  # inactive config
    assert not PointToPoint(impair_ba=Impairment(loss=0.01)).a.checksum_offload
    seg = Segment()
    clean = seg.add_endpoint()
    assert clean.checksum_offload
    seg.add_endpoint(rx_impairment=Impairment(corrupt=0.001))
    assert not clean.checksum_offload  # one impaired port and nobody may skip them


def test_taps_see_link_and_endpoint_traffic() -> None:
    clock = FakeClock()
    link = PointToPoint(clock=clock)
    wired([link.a, link.b])
    link_tap, b_tap = Recorder(), Recorder()
    link.tap = link_tap
    link.b.tap = b_tap
    f1, f2 = eth(mac(2), mac(1)), eth(mac(1), mac(2))
    link.a.send(f1)
    clock.t += 5
    link.b.send(f2)
    assert list(link_tap.records) == [(1_000_000_000, f1), (1_000_000_005, f2)]
    assert list(b_tap.records) == [(1_000_000_000, f1), (1_000_000_005, f2)]  # rx, then tx


# -- impairments on virtual time --------------------------------------------------------------


def test_delay_released_by_poll_on_virtual_time() -> None:
    clock = FakeClock()
    link = PointToPoint(clock=clock, impair_ab=Impairment(delay=10 * MS))
    ia, ib = wired([link.a, link.b])
    link.a.send(eth(mac(2), mac(1)))
    link.b.send(eth(mac(1), mac(2)))  # the other direction is clean
    assert ib.take() == [] and len(ia.take()) == 1
    start = clock.t
    assert link.next_deadline() == start + 10 * MS
    assert link.poll(start + 10 * MS - 1) == 0
    assert link.poll(start + 10 * MS) == 1
    assert len(ib.take()) == 1 and link.next_deadline() is None


def test_rx_impairment_on_one_port_of_a_switch() -> None:
    clock = FakeClock()
    seg = Segment(clock=clock, deliver_inline=False)
    a = seg.add_endpoint(mac=mac(1))
    b = seg.add_endpoint(mac=mac(2), rx_impairment=Impairment(loss=1.0))
    c = seg.add_endpoint(mac=mac(3))
    _, ib, ic = wired([a, b, c])
    a.send(eth(BROADCAST, mac(1)))
    assert seg.poll() == 1
    assert ib.take() == [] and len(ic.take()) == 1
    assert seg.stats()["lost"] == 1


def test_impaired_link_reproducible_by_seed() -> None:
    def trace(seed: int) -> list[tuple[int, bytes]]:
        clock = FakeClock()
        imp = Impairment(loss=0.2, duplicate=0.1, corrupt=0.1, delay=1 * MS, jitter=1 * MS,
                         seed=seed)
        link = PointToPoint(KIND_IP, clock=clock, impair_ab=imp)
        got: list[tuple[int, bytes]] = []
        link.b.set_receiver(lambda frame: got.append((clock.t, frame)))
        for i in range(500):
            link.a.send(bytes([0x45, i % 256]) + bytes(30))
            clock.t += 100_000
            link.poll(clock.t)
        while (deadline := link.next_deadline()) is not None:
            clock.t = deadline
            link.poll(deadline)
        return got

    assert trace(1) == trace(1)
    assert trace(1) != trace(2)


# -- threads ---------------------------------------------------------------------------------


def test_worker_thread_delivers_queued_and_delayed_frames() -> None:
    link = PointToPoint(KIND_IP, deliver_inline=False, impair_ba=Impairment(delay=5 * MS))
    ia, ib = wired([link.a, link.b])
    link.start()
    try:
        with pytest.raises(RuntimeError):
            link.start()
        for i in range(50):
            link.a.send(bytes([0x45, i]) + bytes(20))
        link.b.send(b"\x45" + bytes(20))
        deadline = time.monotonic() + 10
        while (len(ib.frames) < 50 or len(ia.frames) < 1) and time.monotonic() < deadline:
            time.sleep(0.001)
    finally:
        link.stop()
    assert [f[1] for f in ib.take()] == list(range(50))
    assert len(ia.take()) == 1


@pytest.mark.stress
@pytest.mark.parametrize("inline", [True, False])
def test_concurrent_senders_every_frame_accounted_for(inline: bool) -> None:
    threads, per_thread = 4, 1500
    seg = Segment(deliver_inline=inline, backlog=10**6)
    eps = [seg.add_endpoint(f"h{i}", mac(i)) for i in range(threads)]
    sink = seg.add_endpoint("sink", mac(99))
    (box,) = wired([sink])
    for ep in eps:
        ep.set_receiver(lambda frame: None)
    # teach the switch where the sink is, so the senders' frames are unicast
    sink.send(eth(BROADCAST, mac(99)))
    start = threading.Barrier(threads)

    def sender(index: int) -> None:
        start.wait()
        for n in range(per_thread):
            eps[index].send(eth(mac(99), mac(index), index.to_bytes(2, "big") + n.to_bytes(4, "big")
                                + bytes(40)))

    workers = [threading.Thread(target=sender, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    if not inline:
        while seg.pump():
            pass
    got = box.take()
    assert len(got) == threads * per_thread
    # per-sender order survives, and nothing was duplicated or invented
    for index in range(threads):
        seq = [int.from_bytes(f[16:20], "big") for f in got if f[14:16] == index.to_bytes(2, "big")]
        assert seq == list(range(per_thread))
    stats = sink.stats()
    assert stats["rx_packets"] == threads * per_thread and stats["rx_dropped"] == 0
    assert sum(ep.stats()["tx_packets"] for ep in eps) == threads * per_thread
    assert seg.stats()["frames"] == threads * per_thread + 1


@pytest.mark.stress
def test_concurrent_senders_through_impairments_accounted_for() -> None:
    threads, per_thread = 4, 1000
    seg = Segment(KIND_IP)
    eps = [seg.add_endpoint(tx_impairment=Impairment(loss=0.1, duplicate=0.05, seed=i))
           for i in range(threads)]
    sink = seg.add_endpoint("sink")
    (box,) = wired([sink])
    for ep in eps:
        ep.set_receiver(lambda frame: None)
    start = threading.Barrier(threads)

    def sender(index: int) -> None:
        start.wait()
        for n in range(per_thread):
            eps[index].send(bytes([0x45, index]) + n.to_bytes(4, "big"))

    workers = [threading.Thread(target=sender, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stats = seg.stats()
    received = len(box.take())
    # every sent frame is lost, or reaches the sink (and the other senders) once per copy
    assert received == threads * per_thread - stats["lost"] + stats["duplicated"]
    assert stats["lost"] > 0 and stats["duplicated"] > 0
    assert sink.stats()["rx_packets"] == received


def test_receiver_that_raises_loses_only_its_frame() -> None:
    seg = Segment(KIND_IP)
    eps = [seg.add_endpoint() for _ in range(3)]
    _, _, box = wired(eps)

    def broken(frame: bytes) -> None:
        raise RuntimeError("host bug")

    eps[1].set_receiver(broken)
    assert eps[0].send(b"\x45" + bytes(30))  # the sender is not told about the crash
    assert len(box.take()) == 1
    assert seg.stats()["receiver_errors"] == 1
    assert isinstance(seg.last_error, RuntimeError)


def test_point_to_point_senders_in_both_directions_count_exactly() -> None:
    """A clean inline point-to-point link sends with no lock and per-thread counters
    (loopback's LLTX): threads sending both ways at once lose no frame and no count, and
    an oversized frame still takes the checked path and is counted as an MTU drop."""
    link = PointToPoint(mtu=1500)
    inbox_a, inbox_b = wired([link.a, link.b])
    threads, per_thread = 4, 2000
    start = threading.Barrier(threads)

    def sender(index: int) -> None:
        source = link.a if index % 2 == 0 else link.b
        start.wait()
        for n in range(per_thread):
            assert source.send(eth(mac(9), mac(index), index.to_bytes(2, "big")
                                   + n.to_bytes(4, "big") + bytes(40)))

    workers = [threading.Thread(target=sender, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not link.a.send(eth(mac(9), mac(1), bytes(1501)))  # over the MTU: dropped
    each_way = threads // 2 * per_thread
    for inbox, index0 in ((inbox_b, 0), (inbox_a, 1)):
        got = inbox.take()
        assert len(got) == each_way
        for index in range(index0, threads, 2):  # each sender's frames, in order
            tag = index.to_bytes(2, "big")
            assert [int.from_bytes(f[16:20], "big") for f in got if f[14:16] == tag] \
                == list(range(per_thread))
    a, b, both = link.a.stats(), link.b.stats(), link.stats()
    assert a["tx_packets"] == each_way + 1 and a["tx_dropped"] == 1
    assert b["tx_packets"] == each_way and b["rx_packets"] == each_way
    assert a["rx_packets"] == each_way and a["rx_bytes"] == each_way * 60
    assert both["frames"] == both["delivered"] == 2 * each_way and both["mtu_drops"] == 1


def test_point_to_point_folds_the_counts_of_threads_that_ended() -> None:
    link = PointToPoint(mtu=1500)
    wired([link.a, link.b])

    def send(n: int) -> None:
        for _ in range(n):
            link.a.send(eth(mac(2), mac(1)))

    for n in (3, 4, 5):  # three threads, one after the other
        worker = threading.Thread(target=send, args=(n,))
        worker.start()
        worker.join()
    send(6)  # this thread registers last: the ended threads' shards are folded
    assert len(link._shards) == 1
    assert link.a.stats()["tx_packets"] == 18 and link.b.stats()["rx_packets"] == 18
    assert link.stats()["delivered"] == 18


def test_point_to_point_counts_a_thread_that_reports_ended_but_still_sends() -> None:
    """From interpreter shutdown on, the main thread reports ``is_alive()`` False while
    it still runs atexit handlers.  A thread registering then must not fold main's shard
    away: every frame main sends at exit is counted (was 4 of 9)."""
    script = textwrap.dedent("""
        import atexit, threading, time
        from rcunet.link.memory import PointToPoint
        link = PointToPoint()
        link.b.set_receiver(lambda frame: None)
        frame = bytes([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 8, 0]) + b"x" * 46
        main = threading.main_thread()

        def late_sender():  # non-daemon: the interpreter waits for it at shutdown
            while main.is_alive():
                time.sleep(0.005)
            link.a.send(frame)  # this thread's first frame: it registers a shard

        @atexit.register
        def at_exit():  # after threading's shutdown: main reports not alive
            for _ in range(5):
                link.a.send(frame)
            print(link.a.stats()["tx_packets"], link.stats()["frames"])

        for _ in range(3):
            link.a.send(frame)
        threading.Thread(target=late_sender).start()
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.split() == ["9", "9"]


def test_segment_frame_racing_an_impaired_attach_meets_the_impairment() -> None:
    """A send that found the segment clean (lock-free) while an endpoint with an
    impairment is being attached: the frame the new endpoint gets goes through that
    impairment (was delivered unimpaired)."""
    seg = Segment()
    a = seg.add_endpoint(mac=mac(1))
    checked, go = threading.Event(), threading.Event()

    def paused_after_the_check() -> None:
        if not checked.is_set():  # the sender's frame, the only one sent
            checked.set()
            go.wait(5)

    with hooks.installed({CLEAN_BEFORE_LOCK: paused_after_the_check}):
        sender = threading.Thread(target=a.send, args=(eth(BROADCAST, mac(1)),))
        sender.start()
        assert checked.wait(5)
        c = seg.add_endpoint(mac=mac(3), rx_impairment=Impairment(loss=1.0))
        (got,) = wired([c])
        go.set()
        sender.join(5)
    assert not got.frames and c.rx_impairment is not None
    assert c.rx_impairment.counters["lost"] == 1
