"""asyncio over rcunet sockets: the standard library's streams in drop-in mode and
``open_connection(sock=...)`` (``loop.create_connection(sock=...)``) with an rcunet socket.
Also run in the free-threaded lane (scripts/test); the TLS cases are in
test_compat_asyncio_tls.py (trustme needs cryptography, which has no 3.13t wheel)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from compat_support import ServerThread, echo, exchange, sha

import rcunet


def _asyncio_echo_server(host: Any, port: int) -> ServerThread:
    """asyncio.start_server on ``host`` in a loop of its own thread, until told to stop."""

    def run(ready: ServerThread) -> None:
        async def main() -> None:
            stop = asyncio.Event()
            loop = asyncio.get_running_loop()
            server = await asyncio.start_server(echo, "0.0.0.0", port)
            ready.set(lambda: loop.call_soon_threadsafe(stop.set))
            async with server:
                await stop.wait()

        asyncio.run(main())

    return ServerThread(host, run)


def test_stdlib_streams_drop_in(net: Any, payload: bytes) -> None:
    _net, a, b = net
    server = _asyncio_echo_server(b, 7100)

    async def client() -> bytes:
        reader, writer = await asyncio.open_connection("b", 7100)
        return await exchange(reader, writer, payload)

    try:
        with rcunet.patched(a):
            echoed = asyncio.run(client())
    finally:
        server.value()
        server.join()
    assert sha(echoed) == sha(payload)


def test_create_connection_with_rcunet_socket(net: Any, payload: bytes) -> None:
    """No patch on the client: an rcunet socket handed to asyncio's own transport."""
    _net, a, b = net
    server = _asyncio_echo_server(b, 7101)

    async def client() -> bytes:
        sock = a.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.connect(("10.0.0.2", 7101))
        sock.setblocking(False)
        reader, writer = await asyncio.open_connection(sock=sock)
        return await exchange(reader, writer, payload)

    try:
        echoed = asyncio.run(client())
    finally:
        server.value()
        server.join()
    assert sha(echoed) == sha(payload)
