"""Ordinary threaded, blocking-socket, selectors and asyncio programs under simulation,
over 5% loss and 50 ms delay: every payload checked by hash, one seed one pcap."""

from __future__ import annotations

import asyncio
import hashlib
import os
import random
import selectors
import socket
import threading
import time
from typing import Any

from sim_support import LOSSY, sha, two_hosts

from rcunet.link.pcap import PcapWriter


def _echo_server() -> None:
    with socket.create_server(("0.0.0.0", 7000)) as listener:
        while True:
            conn, _peer = listener.accept()
            threading.Thread(target=_echo, args=(conn,), daemon=True).start()


def _echo(conn: socket.socket) -> None:
    with conn:
        while data := conn.recv(65536):
            conn.sendall(data)


def _client(payload: bytes) -> str:
    with socket.create_connection(("10.0.0.2", 7000), timeout=120) as conn:
        sender = threading.Thread(target=_send_all, args=(conn, payload))
        sender.start()
        got = bytearray()
        while data := conn.recv(65536):
            got += data
        sender.join()
    return sha(bytes(got))


def _send_all(conn: socket.socket, payload: bytes) -> None:
    conn.sendall(payload)
    conn.shutdown(socket.SHUT_WR)


def _echo_run(seed: int, pcap_path: str) -> tuple[list[str], list[str], str, float]:
    sim, a, b = two_hosts(seed, LOSSY)
    pcap = PcapWriter(pcap_path)
    for link in sim.network.links:
        link.tap = pcap
    payloads = [random.Random(i).randbytes(50_000 * (i + 1)) for i in range(4)]
    sim.spawn(b, _echo_server, daemon=True)
    clients = [sim.spawn(a, _client, p) for p in payloads]
    assert sim.run()
    sim.close()
    pcap.close()
    with open(pcap_path, "rb") as file:
        digest = hashlib.sha256(file.read()).hexdigest()
    return [c.result for c in clients], [sha(p) for p in payloads], digest, sim.now


def test_threaded_echo_over_loss_is_intact_and_one_seed_gives_one_pcap(tmp_path: Any) -> None:
    got, sent, first, elapsed = _echo_run(7, str(tmp_path / "one.pcap"))
    assert got == sent
    assert elapsed > 0.2  # the 50 ms links took simulated time
    again = _echo_run(7, str(tmp_path / "two.pcap"))
    assert again[2] == first and again[3] == elapsed
    other = _echo_run(8, str(tmp_path / "three.pcap"))
    assert other[0] == other[1]
    assert other[2] != first


def test_selectors_server_over_fifty_connections() -> None:
    sim, a, b = two_hosts(3, LOSSY)

    def server() -> None:
        sel = selectors.DefaultSelector()
        listener = socket.create_server(("0.0.0.0", 7100))
        listener.setblocking(False)
        sel.register(listener, selectors.EVENT_READ)
        while True:
            for key, _mask in sel.select(timeout=5):
                if key.fileobj is listener:
                    conn, _ = listener.accept()
                    conn.setblocking(False)
                    sel.register(conn, selectors.EVENT_READ)
                    continue
                conn = key.fileobj
                data = conn.recv(65536)  # type: ignore[union-attr]
                if data:
                    conn.setblocking(True)  # type: ignore[union-attr]
                    conn.sendall(data)  # type: ignore[union-attr]
                    conn.setblocking(False)  # type: ignore[union-attr]
                else:
                    sel.unregister(conn)
                    conn.close()  # type: ignore[union-attr]

    def client(index: int) -> bool:
        payload = random.Random(index).randbytes(3000)
        with socket.create_connection(("10.0.0.2", 7100)) as conn:
            conn.sendall(payload)
            conn.shutdown(socket.SHUT_WR)
            got = b""
            while len(got) < len(payload) and (data := conn.recv(65536)):
                got += data
        return sha(got) == sha(payload)

    sim.spawn(b, server, daemon=True)
    clients = [sim.spawn(a, client, i) for i in range(50)]
    assert sim.run()
    sim.close()
    assert all(c.result for c in clients)


def test_asyncio_streams_echo_on_virtual_time() -> None:
    sim, a, b = two_hosts(5, LOSSY)
    payload = os.urandom(200_000)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def serve() -> None:
        server = await asyncio.start_server(echo, "0.0.0.0", 7200)
        async with server:
            await server.serve_forever()

    async def fetch() -> tuple[str, float]:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.sleep(2.0)  # the loop's time is the simulation's
        reader, writer = await asyncio.open_connection("10.0.0.2", 7200)
        writer.write(payload)
        await writer.drain()
        writer.write_eof()
        got = await reader.read()
        writer.close()
        return sha(got), loop.time() - start

    sim.spawn(b, asyncio.run, serve(), daemon=True)
    client = sim.spawn(a, asyncio.run, fetch())
    assert sim.run()
    sim.close()
    digest, took = client.result
    assert digest == sha(payload)
    assert took > 2.1


def test_an_hour_of_tcp_idle_with_keepalive_and_time_wait() -> None:
    sim, a, b = two_hosts(2, LOSSY)
    ends: list[float] = []

    def server() -> None:
        with socket.create_server(("0.0.0.0", 7300)) as listener:
            conn, _ = listener.accept()
            with conn:
                assert conn.recv(10) == b"hello"
                time.sleep(3600)
                conn.sendall(b"bye")

    def client() -> None:
        with socket.create_connection(("10.0.0.2", 7300)) as conn:
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 60)
            conn.sendall(b"hello")
            assert conn.recv(10) == b"bye"
        ends.append(time.monotonic())

    sim.spawn(b, server)
    sim.spawn(a, client)
    assert sim.run()
    sim.close()
    assert 3600 < ends[0] - 1 < 3700
    # a keepalive probe a minute, each answered: about 60 each way (a few lost)
    assert a.counters.get("TcpOutSegs") > 40 and b.counters.get("TcpOutSegs") > 40
