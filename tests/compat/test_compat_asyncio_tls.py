"""rcunet's own asyncio streams with ``ssl=`` and ``writer.start_tls()``."""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

import pytest
import trustme
from compat_support import echo, exchange, sha

from rcunet.api import asyncio as rcunet_asyncio


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
        tls_server = await rcunet_asyncio.start_server(echo, b, "0.0.0.0", 7443,
                                                       ssl=server_ctx)
        plain_server = await rcunet_asyncio.start_server(_upgrade_then_echo, b, "0.0.0.0",
                                                         7080)
        reader, writer = await rcunet_asyncio.open_connection(a, "10.0.0.2", 7443,
                                                              ssl=client_ctx)
        version = writer.get_extra_info("ssl_object").version()
        over_tls = await exchange(reader, writer, payload)
        reader, writer = await rcunet_asyncio.open_connection(a, "10.0.0.2", 7080)
        writer.write(b"STARTTLS\n")
        assert await reader.readline() == b"OK\n"
        await writer.start_tls(client_ctx, server_hostname="10.0.0.2")
        upgraded = await exchange(reader, writer, payload[:100000])
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
        await echo(reader, writer)

    over_tls, upgraded, version = asyncio.run(main())
    assert version == "TLSv1.3"
    assert sha(over_tls) == sha(payload)
    assert sha(upgraded) == sha(payload[:100000])
