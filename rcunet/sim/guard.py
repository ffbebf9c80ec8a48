"""The drop-in ``socket.socket`` of a simulation: rcunet's, except that a destination
outside the simulated network is refused, naming the call (in the simulation there is
no Internet to reach; a packet to it would silently vanish, and a connect would spend
minutes of simulated retransmissions before it failed).

"Outside" is: not loopback, unspecified, multicast or broadcast, and in no prefix of any
interface of the network's Hosts (an unused address of a simulated subnet is inside: a
program may well probe one).
"""

from __future__ import annotations

import errno
import ipaddress
import socket as _pysocket
from typing import Any

from rcunet.api import patch
from rcunet.api.socket import Socket, pack_address
from rcunet.host.network import Network
from rcunet.sim.patches import refuse

_INET = (-1, _pysocket.AF_INET, _pysocket.AF_INET6)


def _inside(network: Network, packed: bytes) -> bool:
    if len(packed) == 16 and packed[:12] == b"\0" * 10 + b"\xff\xff":
        packed = packed[12:]  # v4-mapped
    address = ipaddress.ip_address(packed)
    if (address.is_loopback or address.is_unspecified or address.is_multicast
            or packed == b"\xff\xff\xff\xff"):
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


class GuardedSocket(Socket):
    """An rcunet socket whose ``connect``/``sendto`` refuse a destination outside the
    network (``connect_ex`` and ``sendmsg`` go through them)."""

    network: Network | None = None

    def _check_destination(self, call: str, address: Any) -> None:
        network = type(self).network
        if network is None or not isinstance(address, tuple) or not address:
            return
        try:
            packed = pack_address(self.family, address[0], self._host)
        except OSError:
            return  # the call itself reports a bad address, as it would unguarded
        if not _inside(network, packed):
            raise refuse(f"socket.{call}({address!r})",
                         f"{address[0]} is outside the simulated network")

    def connect(self, address: tuple[Any, ...]) -> None:
        self._check_destination("connect", address)
        super().connect(address)

    def sendto(self, data: Any, *args: Any) -> int:
        if args:
            self._check_destination("sendto", args[-1])
        return super().sendto(data, *args)


class GuardedSocketType(patch.socket):
    """``socket.socket`` while a simulation runs: a ``GuardedSocket`` for the Internet
    families, ``rcunet.patched``'s answer for the rest."""

    def __new__(cls, family: int = -1, type: int = -1, proto: int = -1,  # noqa: A002
                fileno: int | None = None) -> Any:
        if fileno is None and family in _INET:
            host = patch.current_host()
            if host is None:
                raise OSError(errno.ENODEV, "rcunet drop-in mode has ended")
            return cls._guarded(host, family, type, proto)  # type: ignore[attr-defined]
        # the drop-in class itself decides the rest (a real fd, AF_UNIX, an adopted
        # rcunet fd): this class only guards the Internet sockets it makes
        return patch.socket(family, type, proto, fileno)

    @classmethod
    def for_network(cls, network: Network) -> type[GuardedSocketType]:
        """The class for one network (its own subclasses: no state shared between
        simulations)."""
        guarded = type("GuardedSocket", (GuardedSocket,), {"network": network})
        return type("socket", (cls,), {"_guarded": guarded})
