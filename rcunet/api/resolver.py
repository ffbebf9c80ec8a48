"""Names on an rcunet network: ``getaddrinfo``/``gethostbyname``/``gethostbyaddr`` as
glibc answers them from /etc/hosts, where the hosts file is the Network — each Host's
name gives its addresses, ``Network.add_name`` adds more — and ``localhost`` is the asking
Host's loopback.  Unknown names raise ``socket.gaierror`` with glibc's codes and texts.

Order: IPv4 before IPv6 (gai.conf's ``precedence ::ffff:0:0/96 100``), so a program that
takes the first answer reaches a server listening on ``0.0.0.0`` the way most do.
Link-local addresses are never answered (they need a scope).
"""

from __future__ import annotations

import ipaddress
import socket as _pysocket
from typing import TYPE_CHECKING, Any

from rcunet.tables.entry import AF_INET, AF_INET6
from rcunet.wire.addr import ANY4, ANY6, LOOPBACK4, LOOPBACK6, is_link_local6

if TYPE_CHECKING:
    from rcunet.host.host import Host

_LOCALHOST = ("localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback")
_LOOPBACK = [LOOPBACK4, LOOPBACK6]
_SOCKTYPES = ((_pysocket.SOCK_STREAM, _pysocket.IPPROTO_TCP),
              (_pysocket.SOCK_DGRAM, _pysocket.IPPROTO_UDP),
              (_pysocket.SOCK_RAW, 0))


def _gaierror(code: int) -> _pysocket.gaierror:
    return _pysocket.gaierror(code, _GAI_TEXT.get(code, "Unknown error"))


_GAI_TEXT = {
    _pysocket.EAI_NONAME: "Name or service not known",
    _pysocket.EAI_SERVICE: "Servname not supported for ai_socktype",
    _pysocket.EAI_FAMILY: "ai_family not supported",
    _pysocket.EAI_SOCKTYPE: "ai_socktype not supported",
    _pysocket.EAI_BADFLAGS: "Bad value for ai_flags",
    getattr(_pysocket, "EAI_ADDRFAMILY", -9): "Address family for hostname not supported",
    _pysocket.EAI_AGAIN: "Temporary failure in name resolution",
}
EAI_ADDRFAMILY = getattr(_pysocket, "EAI_ADDRFAMILY", -9)


def host_addresses(host: Host) -> list[bytes]:
    """``host``'s addresses a name answers with: every interface but lo, no link-local,
    IPv4 first; the loopback addresses for a Host with no other."""
    found = [a.addr for iface in host.interfaces.values() if iface.name != "lo"
             for a in iface.addresses if not is_link_local6(a.addr)]
    found.sort(key=len)
    return found or list(_LOOPBACK)


def lookup(host: Host, name: str) -> list[bytes]:
    """Packed addresses for ``name`` as seen from ``host``; gaierror(EAI_NONAME) if none."""
    wanted = name.lower().rstrip(".")
    if wanted in _LOCALHOST:
        return list(_LOOPBACK)
    if wanted == host.name.lower():
        return host_addresses(host)
    network: Any = host.network
    if network is not None:
        extra = network.names.get(wanted)
        if extra:
            return sorted(extra, key=len)
        named = network.host_named(wanted)
        if named is not None:
            return host_addresses(named)
    raise _gaierror(_pysocket.EAI_NONAME)


def _numeric(text: str) -> bytes | None:
    for family in (AF_INET, AF_INET6):
        try:
            return _pysocket.inet_pton(family, text.split("%", 1)[0])
        except OSError:
            pass
    return None


def resolve(host: Host, name: str, family: int) -> bytes:
    """``name`` -> one packed address for a socket of ``family`` (what ``connect``,
    ``bind`` and ``sendto`` do with a name)."""
    addresses = lookup(host, name)
    wanted = 4 if family == AF_INET else 16
    for addr in addresses:
        if len(addr) == wanted:
            return addr
    raise _gaierror(EAI_ADDRFAMILY)


def _port(port: Any, socktype: int) -> int:
    if port is None:
        return 0
    if isinstance(port, int):
        return port
    if isinstance(port, bytes):
        port = port.decode()
    if isinstance(port, str):
        if port.isdigit():
            return int(port)
        proto = "udp" if socktype == _pysocket.SOCK_DGRAM else "tcp"
        try:
            return _pysocket.getservbyname(port, proto)  # /etc/services, a local file
        except OSError:
            raise _gaierror(_pysocket.EAI_SERVICE) from None
    raise TypeError("getaddrinfo() argument 2 must be integer or string")


def getaddrinfo(host: Host, name: Any, port: Any, family: int = 0, type: int = 0,
                proto: int = 0, flags: int = 0) -> list[tuple[Any, ...]]:
    """``socket.getaddrinfo`` answered from the network's names."""
    if family not in (0, AF_INET, AF_INET6):
        raise _gaierror(_pysocket.EAI_FAMILY)
    if isinstance(name, bytes):
        name = name.decode("idna")
    if name is None or name == "":
        if name is None and port is None:
            raise _gaierror(_pysocket.EAI_NONAME)
        passive = flags & _pysocket.AI_PASSIVE
        addresses = [ANY4, ANY6] if passive else list(_LOOPBACK)
    else:
        packed = _numeric(name)
        if packed is None and flags & _pysocket.AI_NUMERICHOST:
            raise _gaierror(_pysocket.EAI_NONAME)
        addresses = [packed] if packed is not None else lookup(host, name)
    if family:
        kept = [a for a in addresses if len(a) == (4 if family == AF_INET else 16)]
        if not kept:
            raise _gaierror(EAI_ADDRFAMILY if name else _pysocket.EAI_NONAME)
        addresses = kept
    socktypes = [(t, p) for t, p in _SOCKTYPES if (not type or t == type)
                 and (not proto or p == proto or t == _pysocket.SOCK_RAW)]
    if type and not socktypes:
        raise _gaierror(_pysocket.EAI_SOCKTYPE)
    if not type and proto:
        socktypes = [(t, p) for t, p in socktypes if p == proto]
    number = _port(port, type)
    canon = name if flags & _pysocket.AI_CANONNAME and name else ""
    results = []
    for addr in addresses:
        fam = _pysocket.AddressFamily(AF_INET if len(addr) == 4 else AF_INET6)
        text = _pysocket.inet_ntop(fam, addr)
        sockaddr: tuple[Any, ...] = (text, number) if fam == AF_INET else (text, number, 0, 0)
        for socktype, protocol in socktypes:
            results.append((fam, _pysocket.SocketKind(socktype), proto or protocol,
                            canon, sockaddr))
            canon = ""
    return results


def gethostbyname(host: Host, name: str) -> str:
    packed = _numeric(name)
    if packed is not None and len(packed) == 4:
        return _pysocket.inet_ntop(AF_INET, packed)
    return _pysocket.inet_ntop(AF_INET, resolve(host, name, AF_INET))


def gethostbyname_ex(host: Host, name: str) -> tuple[str, list[str], list[str]]:
    v4 = [a for a in lookup(host, name) if len(a) == 4] if _numeric(name) is None else [
        _pysocket.inet_pton(AF_INET, gethostbyname(host, name))]
    if not v4:
        raise _gaierror(EAI_ADDRFAMILY)
    return name, [], [_pysocket.inet_ntop(AF_INET, a) for a in v4]


def gethostbyaddr(host: Host, address: str) -> tuple[str, list[str], list[str]]:
    """The Host (or added name) owning ``address``; ``socket.herror`` otherwise."""
    packed = _numeric(address)
    if packed is None:
        packed = lookup(host, address)[0]
    text = str(ipaddress.ip_address(packed))
    if packed in _LOOPBACK:
        return "localhost", [], [text]
    network: Any = host.network
    candidates = [host] if network is None else network.hosts
    for other in candidates:
        if packed in host_addresses(other):
            return other.name, [], [text]
    if network is not None:
        for name, addresses in network.names.items():
            if packed in addresses:
                return name, [], [text]
    raise _pysocket.herror(1, "Unknown host")

