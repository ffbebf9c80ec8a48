"""Seed 001's stream, shared by the in-process lab (seed001.py) and ``--procs``
(seed001_procs.py, whose child imports it by name): the numbered 64 KB blocks the sender
writes, the slow reader's loop, and the backlog sampler."""

from __future__ import annotations

import hashlib
import struct
import threading
import time
from typing import Any

from rcunet.api import host_socket
from rcunet.bench import neper
from rcunet.lab.report import neper_lines

BLOCK = bytes(range(256)) * 256  # 64 KB
SAMPLE_INTERVAL = 0.0005  # the backlog sampler's period (s)
IO_TIMEOUT = 20.0


def block(index: int) -> bytes:
    """The ``index``-th 64 KB block: the pattern with the block number in front, so a
    lost, repeated or reordered block changes the hash."""
    return struct.pack(">Q", index) + BLOCK[8:]


def spin(ns: int) -> None:
    """CPU work the reader does between recv calls (a parser, say)."""
    end = time.perf_counter_ns() + ns
    while time.perf_counter_ns() < end:
        pass


class BacklogSampler:
    """Samples the socket's backlog length every ``SAMPLE_INTERVAL`` seconds.

    Concurrency: reads ``sl.owned`` and ``sl.backlog_len`` without ``slock`` — each one
    attribute load of an int/bool (atomic), pairing with the stores the owner and the
    receive worker make under ``slock``.  The two loads may come from different moments;
    an average over thousands of samples does not care.
    """

    def __init__(self, sk: Any) -> None:
        self._sl = sk.sl
        self._stop = threading.Event()
        self.samples = 0  # owner: the sampler thread; read after stop() joins it
        self.owned_samples = 0  # owner: the sampler thread
        self.owned_bytes = 0  # owner: the sampler thread
        self._thread = threading.Thread(target=self._run, name="backlog-sampler", daemon=True)

    def start(self) -> BacklogSampler:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        sl = self._sl
        while not self._stop.wait(SAMPLE_INTERVAL):
            self.samples += 1
            if sl.owned:  # atomic: one attribute load
                self.owned_samples += 1
                self.owned_bytes += sl.backlog_len  # atomic: one attribute load

    def average_while_owned(self) -> float:
        return self.owned_bytes / self.owned_samples if self.owned_samples else 0.0


def percentile_ns(values: list[int], p: float) -> int:
    return int(neper.percentile(sorted(values), p))


def deferred_counts(layer: Any) -> dict[str, int]:
    deferred = layer.deferred
    return {"deferred": deferred.deferred.value(), "freed_local": deferred.freed_local.value(),
            "drained": deferred.drained.value()}


def send_blocks(cli: Any, duration: float, sent: dict[str, Any],
                errors: list[BaseException]) -> None:
    """The sender: numbered blocks for ``duration`` seconds, then close; ``sent`` gets
    the byte count and the digest, ``errors`` what went wrong."""
    digest = hashlib.blake2b()
    index = 0
    deadline = time.monotonic() + duration
    try:
        while time.monotonic() < deadline:
            data = block(index)
            cli.sendall(data)
            digest.update(data)
            sent["bytes"] += len(data)
            index += 1
    except BaseException as exc:  # reported by the caller
        errors.append(exc)
    finally:
        sent["digest"] = digest.digest()
        cli.close()


def read_blocks(child: Any, chunk: int, work_ns: int, sleep_s: float,
                duration: float) -> dict[str, Any]:
    """The slow reader: ``recv(chunk)`` until EOF, ``work_ns`` of CPU work and
    ``sleep_s`` of sleep between calls; what it measured (the digest as bytes).
    ``duration``: the sender's, for neper's sampling interval."""
    clock = neper.ThreadClock(max(duration / 10, 0.01))
    flow = neper.FlowStats(0, 0, clock, keep_latency=False)
    digest = hashlib.blake2b()
    received = recvs = 0
    sk = host_socket(child)
    holds: list[int] = []  # ns of socket-lock ownership inside each recv() call
    recv_cpu_ns = 0  # the reader thread's CPU time inside recv()
    usage_start = neper.Usage.now()
    began = time.perf_counter()
    try:
        while True:
            # hold_ns is written only by the socket's owner, which here is always this
            # thread (in recv's release), so reading it around our own recv is exact.
            held_before = sk.hold_ns
            cpu_before = time.thread_time_ns()
            data = child.recv(chunk)
            recv_cpu_ns += time.thread_time_ns() - cpu_before
            holds.append(sk.hold_ns - held_before)
            if not data:
                break
            now = neper.monotonic_ns()
            digest.update(data)
            received += len(data)
            recvs += 1
            flow.event(now, len(data))
            if work_ns:
                spin(work_ns)
            if sleep_s:
                time.sleep(sleep_s)
    finally:
        elapsed = time.perf_counter() - began
    flow.finish(neper.monotonic_ns())
    return {
        "bytes_received": received,
        "digest": digest.digest(),
        "recv_calls": recvs,
        "reader_recv_cpu_us_per_mb": recv_cpu_ns / 1e3 / (received / 1e6) if received else 0.0,
        "hold_ns_per_recv_p50": percentile_ns(holds, 50),
        "hold_ns_per_recv_p99": percentile_ns(holds, 99),
        "elapsed": elapsed,
        "throughput_mbit": received * 8 / elapsed / 1e6 if elapsed else 0.0,
        "neper": neper_lines("tcp_stream", [flow], usage_start, neper.Usage.now()),
    }


def finish_reader(result: dict[str, Any], sent: dict[str, Any],
                  sampler: BacklogSampler | None) -> dict[str, Any]:
    """The reader's figures with the sender's count and digest, and the sampler's."""
    result = dict(result)
    digest = result.pop("digest")
    result["bytes_sent"] = sent["bytes"]
    result["hash_ok"] = digest == sent["digest"]
    if sampler is not None:
        result["backlog_avg_bytes"] = sampler.average_while_owned()
        result["owned_share"] = (sampler.owned_samples / sampler.samples
                                 if sampler.samples else 0.0)
    return result
