"""What a Host keeps per connection after the connection is gone: nothing that grows.

Churn connections against a service that runs a thread per connection (as `rcunet up`'s
services do, and as ab drives them) on in-process Hosts, then count what is left: the
counter shards (one per thread that ever counted, before the fix: ~330 bytes per
connection in the issue's soak), the UDP table's stat shards, the connection table, the
timers and the service's own bookkeeping.  Counts, not timings."""

from __future__ import annotations

import gc
import socket
import threading

from tcp_helpers import (
    B4,
    accept,
    assert_no_leaks,
    listener,
    start_connect,
    time_wait_entries,
    wait_eof,
)

from rcunet.host.network import Network
from rcunet.services import start_services
from rcunet.sync import lockdep
from rcunet.sync.shards import ShardedStats

CHURN = 120


class _Stats(ShardedStats):
    FIELDS = ("events",)


def _echo_once(host: object) -> None:
    sock = host.socket(socket.AF_INET, socket.SOCK_STREAM)  # type: ignore[attr-defined]
    sock.settimeout(10)
    sock.connect(("10.0.0.2", 7))
    sock.sendall(b"ping")
    assert sock.recv(10) == b"ping"
    sock.close()


def test_connection_churn_leaves_no_per_connection_state() -> None:
    network = Network(threaded=True)
    client, server = network.host("a"), network.host("b")
    network.link(client, server, ["10.0.0.1/24"], ["10.0.0.2/24"])
    network.start()
    try:
        with start_services(server, "echo:7") as services:
            _echo_once(client)
            for _ in range(CHURN):
                _echo_once(client)
            service = services.services[0]
            assert network.run_until(lambda: not service._conns, 10.0)
            assert network.run_until(
                lambda: server.counters.get("TcpPassiveOpens") == CHURN + 1, 10.0)
            # one shard per live thread (workers, timers, the listener's accept loop and
            # the connection threads not yet gone), not one per connection served
            assert network.run_until(lambda: server.counters.live_shards()
                                     <= threading.active_count(), 10.0)
            assert server.counters.live_shards() < CHURN // 4
            # the counts of the threads that ended are kept
            assert server.counters.get("TcpPassiveOpens") == CHURN + 1
            with service._lock:
                assert len(service._threads) <= threading.active_count()
        tables = server.tcp.hashinfo.ehash
        # what remains is TIME_WAIT (60 s, bounded by tcp_max_tw_buckets), one entry and
        # one timer each at most, never more than one per connection; the server's last
        # connection leaves LAST_ACK only when a receive worker has taken the client's
        # final ACK, which a loaded machine may not have done yet
        assert network.run_until(lambda: len(tables) == tables.tw_count(), 10.0)
        assert tables.tw_count() <= CHURN + 1
        assert len(server.timers) <= tables.tw_count() + 8
    finally:
        network.close()


def test_sharded_stats_fold_a_finished_threads_shard() -> None:
    stats = _Stats()

    def bump() -> None:
        stats.shard()[0] += 5

    threads = [threading.Thread(target=bump) for _ in range(50)]
    for thread in threads:
        thread.start()
        thread.join()
    assert stats.snapshot() == {"events": 250}
    assert stats.live_shards() == 0
    stats.shard()[0] += 1  # this thread's own shard stays live
    assert stats.snapshot() == {"events": 251} and stats.live_shards() == 1


def _cyclic_garbage_of_rcunet() -> dict[str, int]:
    """Collect with DEBUG_SAVEALL and count the unreachable objects rcunet's modules
    define, by type (the cyclic collector being off until then, every cycle a connection
    left behind is still there)."""
    flags = gc.get_debug()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        found: dict[str, int] = {}
        for obj in gc.garbage:
            kind = type(obj)
            if kind.__module__.startswith("rcunet."):
                name = f"{kind.__module__}.{kind.__qualname__}"
                found[name] = found.get(name, 0) + 1
        return found
    finally:
        gc.garbage.clear()
        gc.set_debug(flags)


def test_time_wait_entries_leave_no_cycle_behind() -> None:
    # A TIME_WAIT entry keeps its timer handle and the fired timer's callback held the
    # entry: one cycle per connection that only a full collection freed (the soak's
    # RSS climbing past the TIME_WAIT plateau).  Reference counting alone must free it.
    # Locks as the daemon has them (no lockdep, no lockstat): instrumented locks point
    # at their own methods, a cycle of their own that only those diagnosis modes pay.
    lockdep.disable()  # the suite's guard turns it back on
    net, a, b = Network.two_hosts()
    srv = listener(b, socket.AF_INET, B4, 8080)
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(20):
            cli = start_connect(a, socket.AF_INET, B4, 8080)
            child = accept(net, srv)
            cli.close()  # the client closes first: its side enters TIME_WAIT
            wait_eof(net, child)
            child.close()
        net.run(1)
        assert len(time_wait_entries(a)) == 20
        net.run(61)  # 2MSL: every entry expired and its timer fired
        assert not time_wait_entries(a)
        assert _cyclic_garbage_of_rcunet() == {}
    finally:
        if was_enabled:
            gc.enable()
    srv.close()
    assert_no_leaks(a, b)
