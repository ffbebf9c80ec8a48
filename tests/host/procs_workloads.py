"""Functions that run in a child process with its Host (``HostProcess.start``): they
must be importable by name, so they live in this module rather than in a test."""

from __future__ import annotations

import hashlib
import os
import random
import socket
import threading
from typing import Any

from rcunet.bench.cpus import parse_cpu_list

CHUNK = 65536


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


def listen(child: Any, family: int, address: str, port: int) -> Any:
    server = child.host.socket(family, socket.SOCK_STREAM)
    server.bind((address, port))
    server.listen(8)
    child.report(("listening", port))
    return server


def recv_hash(sock: Any, size: int) -> str:
    digest, got = hashlib.sha256(), 0
    while got < size:
        data = sock.recv(min(CHUNK, size - got))
        if not data:
            raise ConnectionError(f"EOF after {got} of {size} bytes")
        digest.update(data)
        got += len(data)
    return digest.hexdigest()


def serve_bulk(child: Any, family: int, address: str, port: int, size: int,
               seed: int) -> dict[str, str]:
    """Accept one connection; read ``size`` bytes while writing ``size`` bytes of
    ``payload(seed, size)``; return the hash of what was read and of what was written."""
    server = listen(child, family, address, port)
    conn, _peer = server.accept()
    data = payload(seed, size)
    errors: list[BaseException] = []

    def write() -> None:
        try:
            conn.sendall(data)
        except BaseException as exc:  # noqa: BLE001 - handed to the main thread
            errors.append(exc)

    writer = threading.Thread(target=write)
    writer.start()
    received = recv_hash(conn, size)
    writer.join()
    if errors:
        raise errors[0]
    conn.close()
    server.close()
    return {"received": received, "sent": hashlib.sha256(data).hexdigest()}


def send_close_return(child: Any, family: int, address: str, port: int, size: int,
                      seed: int) -> int:
    """Accept one connection, queue ``size`` bytes of ``payload(seed, size)`` (a send
    buffer that holds them all: SO_SNDBUF is doubled), close and return at once: what
    is still queued must reach the peer all the same, as a kernel delivers a closed
    socket's data after its program exits."""
    server = child.host.socket(family, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)  # accepted sockets inherit it
    server.bind((address, port))
    server.listen(1)
    child.report(("listening", port))
    conn, _peer = server.accept()
    conn.sendall(payload(seed, size))
    conn.close()
    server.close()
    child.report(("closed", size))
    return size


def serve_sink(child: Any, family: int, address: str, port: int) -> int:
    """Accept one connection and read until EOF or the parent's stop(); the count."""
    server = listen(child, family, address, port)
    conn, _peer = server.accept()
    conn.settimeout(0.2)
    total = 0
    while not child.stopping.is_set():
        try:
            data = conn.recv(CHUNK)
        except TimeoutError:
            continue
        if not data:
            break
        total += len(data)
        if total >= CHUNK and not getattr(child, "told", False):
            child.told = True
            child.report(("reading", total))
    return total


def serve_then_fail(child: Any, family: int, address: str, port: int, how: str) -> None:
    """Accept, read a little, then fail: ``raise`` (the Host closes and resets its
    connections, as a crashing program's kernel would) or ``exit`` (os._exit(3))."""
    server = listen(child, family, address, port)
    conn, _peer = server.accept()
    recv_hash(conn, CHUNK)
    child.conn = conn  # still open when the Host goes down (no orderly close first)
    child.report(("read", CHUNK))
    if how == "exit":
        os._exit(3)
    raise RuntimeError("the server's program crashed")


def wait_for_stop(child: Any, token: int) -> list[int]:
    """No traffic: report the pid, wait for the parent's stop(), return the token."""
    child.report(("pid", os.getpid()))
    child.stopping.wait(30)
    return [token, os.getpid()]


def thread_cpus(child: Any) -> list[list[int]]:
    """The CPUs each thread of the child may run on (its Host's threads included),
    from /proc: one sorted list per thread."""
    found = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/status") as status:
            for line in status:
                if line.startswith("Cpus_allowed_list:"):
                    found.append(list(parse_cpu_list(line.split(":", 1)[1].strip())))
    return found

