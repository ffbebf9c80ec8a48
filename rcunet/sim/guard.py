"""The sockets of a simulation are rcunet's, except that a destination outside the
simulated network is refused, naming the call (in the simulation there is
no Internet to reach; a packet to it would silently vanish, and a connect would spend
minutes of simulated retransmissions before it failed).

"Outside" is: not loopback, unspecified, multicast or broadcast, and in no prefix of any
interface of the network's Hosts (an unused address of a simulated subnet is inside: a
program may well probe one).
"""

from __future__ import annotations

import ipaddress
import socket as _pysocket
from typing import Any

from rcunet.api.socket import Socket, pack_address
from rcunet.host.network import Network
from rcunet.sim.patches import refuse
from rcunet.wire.addr import LIMITED_BROADCAST, unmapped


def _inside(network: Network, packed: bytes) -> bool:
    packed = unmapped(packed)
    address = ipaddress.ip_address(packed)
    if (address.is_loopback or address.is_unspecified or address.is_multicast
            or packed == LIMITED_BROADCAST):
        return True
    for host in network.hosts:
        for iface in host.interfaces.values():
            for own in iface.addresses:
                if len(own.addr) != len(packed):
                    continue
                net = ipaddress.ip_network((own.addr, own.prefix_len), strict=False)
                if address in net:
                    return True
    return False


class DestinationGuard:
    """rcunet's ``Socket.connect``/``sendto``/``sendmsg`` for one run: they refuse a
    destination outside ``network`` (``connect_ex`` goes through ``connect``).

    The methods are replaced on the ``Socket`` class itself (``Patches.replace``), so
    every rcunet socket of the run is guarded: drop-in mode's ``socket.socket`` stays the
    very class ``rcunet.patched`` makes (``isinstance``, subclasses a program defines,
    ``fileno=``), and sockets made with ``host.socket()`` are guarded too."""

    def __init__(self, network: Network) -> None:
        self.network = network

    def methods(self) -> dict[str, Any]:
        connect, sendto, sendmsg = Socket.connect, Socket.sendto, Socket.sendmsg
        check = self._check

        def guarded_connect(sock: Socket, address: tuple[Any, ...]) -> None:
            check(sock, "connect", address)
            connect(sock, address)

        def guarded_sendto(sock: Socket, data: Any, *args: Any) -> int:
            if args and sock.type != _pysocket.SOCK_STREAM:  # TCP's address is ignored
                check(sock, "sendto", args[-1])
            return sendto(sock, data, *args)

        def guarded_sendmsg(sock: Socket, buffers: Any, ancdata: Any = (), flags: int = 0,
                            address: Any = None) -> int:
            if address is not None:
                check(sock, "sendmsg", address)
            return sendmsg(sock, buffers, ancdata, flags, address)

        return {"connect": guarded_connect, "sendto": guarded_sendto,
                "sendmsg": guarded_sendmsg}

    def _check(self, sock: Socket, call: str, address: Any) -> None:
        if not isinstance(address, tuple) or not address:
            return
        try:
            packed = pack_address(sock.family, address[0], sock._host)
        except OSError:
            return  # the call itself reports a bad address, as it would unguarded
        if not _inside(self.network, packed):
            raise refuse(f"socket.{call}({address!r})",
                         f"{address[0]} is outside the simulated network")
