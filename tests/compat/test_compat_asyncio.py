"""asyncio over rcunet sockets: the standard library's streams in drop-in mode,
``loop.create_connection(sock=...)`` with an rcunet socket, and rcunet's own streams with
``ssl=`` and ``start_tls()``.  Also run in the free-threaded lane (scripts/test)."""

from __future__ import annotations

import asyncio
import socket
import ssl
from typing import Any

import pytest
import trustme
from conftest import ServerThread, sha

import rcunet
from rcunet.api import asyncio as rcunet_asyncio


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
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
            server = await asyncio.start_server(_echo, "0.0.0.0", port)
            ready.set(lambda: loop.call_soon_threadsafe(stop.set))
            async with server:
                await stop.wait()

        asyncio.run(main())

    return ServerThread(host, run)


async def _exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
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
        return await _exchange(reader, writer, payload)

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
        return await _exchange(reader, writer, payload)

    try:
        echoed = asyncio.run(client())
    finally:
        server.value()
        server.join()
    assert sha(echoed) == sha(payload)


@pytest.fixture(scope="module")
def contexts() -> tuple[ssl.SSLContext, ssl.SSLContext]:
    ca = trustme.CA()
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ca.issue_cert("10.0.0.2").configure_cert(server)
    client = ssl.create_default_context()
    ca.configure_trust(client)
    return server, client


def test_rcunet_streams_ssl_and_start_tls(net: Any, payload: bytes, contexts: Any) -> None:
    _net, a, b = net
    server_ctx, client_ctx = contexts

    async def main() -> tuple[bytes, bytes, str]:
        tls_server = await rcunet_asyncio.start_server(_echo, b, "0.0.0.0", 7443,
                                                       ssl=server_ctx)
        plain_server = await rcunet_asyncio.start_server(_upgrade_then_echo, b, "0.0.0.0",
                                                         7080)
        reader, writer = await rcunet_asyncio.open_connection(a, "10.0.0.2", 7443,
                                                              ssl=client_ctx)
        version = writer.get_extra_info("ssl_object").version()
        over_tls = await _exchange(reader, writer, payload)
        reader, writer = await rcunet_asyncio.open_connection(a, "10.0.0.2", 7080)
        writer.write(b"STARTTLS\n")
        assert await reader.readline() == b"OK\n"
        await writer.start_tls(client_ctx, server_hostname="10.0.0.2")
        upgraded = await _exchange(reader, writer, payload[:100000])
        tls_server.close()
        plain_server.close()
        return over_tls, upgraded, version

    async def _upgrade_then_echo(reader: asyncio.StreamReader,
                                 writer: asyncio.StreamWriter) -> None:
        assert await reader.readline() == b"STARTTLS\n"
        writer.write(b"OK\n")
        await writer.drain()
        loop = asyncio.get_running_loop()
        transport = await loop.start_tls(writer.transport, writer._protocol,  # type: ignore[attr-defined]
                                         server_ctx, server_side=True)
        writer._transport = transport  # type: ignore[attr-defined]
        await _echo(reader, writer)

    over_tls, upgraded, version = asyncio.run(main())
    assert version == "TLSv1.3"
    assert sha(over_tls) == sha(payload)
    assert sha(upgraded) == sha(payload[:100000])
