"""asyncio streams on rcunet TCP (threaded Hosts): an echo server from ``start_server``,
clients from ``open_connection``, half-close, refused connections."""

from __future__ import annotations

import asyncio
import errno
import hashlib
from collections.abc import Iterator
from typing import Any

import pytest

from rcunet.api.asyncio import open_connection, start_server
from rcunet.host.network import Network


@pytest.fixture
def hosts() -> Iterator[tuple[Any, Any]]:
    net, a, b = Network.two_hosts(threaded=True)
    net.start()
    yield a, b
    net.close()


async def _echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()
    await writer.wait_closed()


def test_echo_server_and_clients(hosts: Any) -> None:
    a, b = hosts

    async def main() -> list[bytes]:
        server = await start_server(_echo, b, "10.0.0.2", 7000)
        async with server:
            async def client(i: int) -> bytes:
                reader, writer = await open_connection(a, "10.0.0.2", 7000)
                payload = hashlib.sha256(b"%d" % i).digest() * 4000  # 128 KB
                writer.write(payload)
                await writer.drain()
                writer.write_eof()
                echoed = await reader.read()
                writer.close()
                await writer.wait_closed()
                return hashlib.sha256(echoed).digest() + hashlib.sha256(payload).digest()

            return await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(4))), 20)

    for pair in asyncio.run(main()):
        assert pair[:32] == pair[32:]


def test_ipv6_and_readline(hosts: Any) -> None:
    a, b = hosts

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        line = await reader.readline()
        writer.write(b"hello " + line)
        await writer.drain()
        writer.close()

    async def main() -> bytes:
        server = await start_server(handle, b, "fd00::2", 7001)
        async with server:
            reader, writer = await open_connection(a, "fd00::2", 7001)
            assert writer.get_extra_info("peername")[:2] == ("fd00::2", 7001)
            writer.write(b"world\n")
            reply = await asyncio.wait_for(reader.read(), 10)
            writer.close()
            return reply

    assert asyncio.run(main()) == b"hello world\n"


def test_connection_refused(hosts: Any) -> None:
    a, _b = hosts

    async def main() -> None:
        await asyncio.wait_for(open_connection(a, "10.0.0.2", 9), 10)

    with pytest.raises(OSError) as info:
        asyncio.run(main())
    assert info.value.errno == errno.ECONNREFUSED
