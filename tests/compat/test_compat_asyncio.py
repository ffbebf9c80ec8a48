"""asyncio over rcunet sockets: the standard library's streams in drop-in mode and
``open_connection(sock=...)`` (``loop.create_connection(sock=...)``) with an rcunet socket.
Also run in the free-threaded lane (scripts/test); the TLS cases are in
test_compat_asyncio_tls.py (trustme needs cryptography, which has no 3.13t wheel)."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

from conftest import ServerThread, sha

import rcunet


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


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


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    payload: bytes) -> bytes:
    """Send ``payload`` while reading its echo; EOF ends a plain stream, the length a TLS
    one (asyncio's TLS transport cannot write_eof)."""
    tls = not writer.can_write_eof()

    async def send() -> None:
        writer.write(payload)
        await writer.drain()
        if not tls:
            writer.write_eof()

    sender = asyncio.ensure_future(send())
    echoed = await (reader.readexactly(len(payload)) if tls else reader.read(-1))
    await sender
    writer.close()
    await writer.wait_closed()
    return echoed


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
