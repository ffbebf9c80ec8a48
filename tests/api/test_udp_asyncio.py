"""asyncio datagram endpoints on rcunet UDP sockets (threaded Hosts)."""

from __future__ import annotations

import asyncio

from rcunet.api.asyncio import create_datagram_endpoint
from rcunet.host.network import Network


class Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport):
        self.transport = transport

    def datagram_received(self, data, addr):
        self.transport.sendto(data.upper(), addr)


class Client(asyncio.DatagramProtocol):
    def __init__(self):
        self.replies: asyncio.Queue = asyncio.Queue()
        self.errors: list[OSError] = []
        self.lost = asyncio.get_running_loop().create_future()

    def datagram_received(self, data, addr):
        self.replies.put_nowait((data, addr))

    def error_received(self, exc):
        self.errors.append(exc)

    def connection_lost(self, exc):
        self.lost.set_result(exc)


def test_datagram_endpoint_echo_both_families():
    net, a, b = Network.two_hosts(threaded=True)
    net.start()

    async def scenario():
        server, _ = await create_datagram_endpoint(b, Echo, local_addr=("0.0.0.0", 7))
        server6, _ = await create_datagram_endpoint(b, Echo, local_addr=("fd00::2", 7))
        for remote in (("10.0.0.2", 7), ("fd00::2", 7)):
            transport, client = await create_datagram_endpoint(a, Client, remote_addr=remote)
            for word in (b"one", b"two", b"three"):
                transport.sendto(word)
                data, addr = await asyncio.wait_for(client.replies.get(), 5)
                assert data == word.upper()
                assert addr[:2] == remote
            assert transport.get_extra_info("peername") == remote
            transport.close()
            assert await asyncio.wait_for(client.lost, 5) is None
        server.close()
        server6.close()

    try:
        asyncio.run(scenario())
    finally:
        net.close()


def test_datagram_endpoint_reports_port_unreachable():
    net, a, b = Network.two_hosts(threaded=True)
    net.start()

    async def scenario():
        transport, client = await create_datagram_endpoint(a, Client,
                                                           remote_addr=("10.0.0.2", 9))
        transport.sendto(b"anyone?")
        for _ in range(250):  # the ICMP error makes the fd readable; the loop reports it
            await asyncio.sleep(0.02)
            if client.errors:
                break
        assert isinstance(client.errors[0], ConnectionRefusedError)
        transport.close()

    try:
        asyncio.run(scenario())
    finally:
        net.close()
