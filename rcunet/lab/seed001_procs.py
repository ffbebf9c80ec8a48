"""``rcunet lab seed001 --procs``: the same bulk stream with the slow reader's Host (the
listener, the reader, its receive worker) in a child process and the sender's Host here,
on an inter-process link (rcunet/host/procs.py, rcunet/link/ipc.py).  The link's
receive thread runs b's receive path (``inline_rx``: it is b's receive worker, as the
softirq on another CPU is in the kernel; a queue to a separate worker thread would add a
hand-off per frame inside the child), so it meets the socket the reader owns: the
seed's backlog, now with the sender running beside the reader instead of taking turns
with it on one GIL.

The result has run_stream's fields, so the lab's checks (every byte arrived, the hash
matches) and report are unchanged; the reader's lock statistics, backlog, buffers and
counters are measured in the child and come back in its Outcome (``server_lockstat``:
the lab's statistics run reports the reader's locks, where the seed's lock is).
"""

from __future__ import annotations

import socket
from typing import Any

from rcunet.api import host_socket
from rcunet.host.network import Network
from rcunet.lab.seed001_stream import (
    IO_TIMEOUT,
    BacklogSampler,
    deferred_counts,
    finish_reader,
    read_blocks,
    send_blocks,
)
from rcunet.sync import lockstat

SERVER = "10.0.0.2"
PORT = 5001
#: A spawned child imports rcunet and builds its Host: allow for a loaded machine.
CHILD_TIMEOUT = 60.0


def run_stream_procs(mode: str, duration: float, *, chunk: int, work_us: int, sleep_us: int,
                     rcvbuf: int, tuning: Any) -> dict[str, Any]:
    net = Network(threaded=True, tuning=tuning)
    a = net.host("a")
    b = net.host_process("b", lockstat=lockstat.enabled())
    net.link(a, b, ["10.0.0.1/24"], [f"{SERVER}/24"], inline_rx=True)
    net.start()
    try:
        b.start(_read, chunk, work_us * 1000, sleep_us / 1e6, rcvbuf, duration)
        message = b.recv(timeout=CHILD_TIMEOUT)
        if message != "listening":
            raise RuntimeError(f"seed001 --procs: the reader's process said {message!r}")
        cli: Any = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        cli.settimeout(IO_TIMEOUT)
        cli.connect((SERVER, PORT))
        sent: dict[str, Any] = {"bytes": 0, "digest": b""}
        errors: list[BaseException] = []
        send_blocks(cli, duration, sent, errors)  # closes cli: the reader sees EOF
        outcome = b.join(timeout=CHILD_TIMEOUT + duration)
        if outcome.failure is not None:
            raise RuntimeError(f"seed001 --procs: the reader's process: {outcome.failure}")
        if errors:
            raise RuntimeError(f"seed001 sender failed: {errors[0]!r}") from errors[0]
        result = finish_reader(outcome.result, sent, None)
        result["mode"] = mode
        result["server_lockstat"] = outcome.lockstat
        return result
    finally:
        net.close()


def _read(child: Any, chunk: int, work_ns: int, sleep_s: float, rcvbuf: int,
          duration: float) -> dict[str, Any]:
    """In the child: accept one connection and read it to the end as the lab's slow
    reader does, sampling the backlog; the reader side's figures."""
    host = child.host
    srv: Any = host.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    srv.bind((SERVER, PORT))
    srv.listen(1)
    srv.settimeout(CHILD_TIMEOUT)
    child.report("listening")
    conn, _ = srv.accept()
    conn.settimeout(IO_TIMEOUT)
    sk = host_socket(conn)
    sampler = BacklogSampler(sk).start()
    try:
        result = read_blocks(conn, chunk, work_ns, sleep_s, duration)
    finally:
        sampler.stop()
    stats = sk.lock_stats()
    conn.close()
    srv.close()
    result.update(
        backlog_avg_bytes=sampler.average_while_owned(),
        owned_share=sampler.owned_samples / sampler.samples if sampler.samples else 0.0,
        hold_ns_avg=stats["hold_ns_total"] / stats["holds"] if stats["holds"] else 0.0,
        hold_ns_max=stats["hold_ns_max"],
        holds=stats["holds"],
        backlog_max_bytes=stats["backlog_max_bytes"],
        backlog_drops=stats["backlog_drops"],
        buffers=deferred_counts(host.tcp),
        nstat=host.counters.nonzero(),
    )
    return result
