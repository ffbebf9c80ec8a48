"""Built-in services that run on rcunet sockets (``rcunet up --serve ...``).

``--serve`` takes ``NAME:PORT`` items separated by commas::

    echo:7,discard:9,udp-echo:7,udp-discard:9,http:80,neper:12866

``start_services(host, "echo:7,http:80")`` starts them (``flags={"neper": "-T 2"}``:
a neper server's own flags, ``rcunet up --neper``) (IPv4 and IPv6 each) and returns
a ``ServiceSet`` whose ``stop()`` closes every socket and connection.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rcunet.host.host import Host
    from rcunet.services.base import Service

# name -> (module, class, one-line help)
SERVICES: dict[str, tuple[str, str, str]] = {
    "echo": ("rcunet.services.simple", "TcpEcho", "TCP echo (RFC 862)"),
    "discard": ("rcunet.services.simple", "TcpDiscard", "TCP discard (RFC 863)"),
    "udp-echo": ("rcunet.services.simple", "UdpEcho", "UDP echo (RFC 862)"),
    "udp-discard": ("rcunet.services.simple", "UdpDiscard", "UDP discard (RFC 863)"),
    "http": ("rcunet.services.http", "HttpResponder",
             "HTTP/1.1: /, /bytes/N, POST /sha256; keep-alive"),
    "neper": ("rcunet.services.neper", "NeperServer",
              "neper's server: control on PORT, data on PORT+1 (neper or rcunet bench -c)"),
}


class ServiceSpec(NamedTuple):
    name: str
    port: int


def parse_specs(text: str) -> list[ServiceSpec]:
    """``"echo:7,http:80"`` -> specs; ValueError naming the bad item otherwise."""
    specs: list[ServiceSpec] = []
    seen: set[tuple[str, int]] = set()
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        name, sep, port_text = item.partition(":")
        if name not in SERVICES:
            raise ValueError(f"unknown service {name!r} (known: {', '.join(SERVICES)})")
        if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
            raise ValueError(f"{item!r}: expected NAME:PORT with PORT 1..65535")
        proto = "udp" if name.startswith("udp-") else "tcp"
        key = (proto, int(port_text))
        if key in seen:
            raise ValueError(f"{item!r}: {proto} port {port_text} is taken by another service")
        seen.add(key)
        specs.append(ServiceSpec(name, int(port_text)))
    return specs


def make_service(host: Host, spec: ServiceSpec, flags: str = "") -> Service:
    """The service ``spec`` names; ``flags`` are its own (only neper takes any: a neper
    server's flags, ``rcunet.services.neper_flags``)."""
    module_name, class_name, _help = SERVICES[spec.name]
    cls = getattr(importlib.import_module(module_name), class_name)
    service: Service = cls(host, spec.port, flags) if flags else cls(host, spec.port)
    return service


def check_flags(specs: list[ServiceSpec], flags: dict[str, str]) -> None:
    """ValueError (one line) for flags of a service not served, or flags it refuses."""
    served = {spec.name for spec in specs}
    for name, text in flags.items():
        if name not in FLAGGED:
            raise ValueError(f"{name} takes no flags")
        if name not in served:
            raise ValueError(f"--{name} given, but --serve has no {name}:PORT")
        FLAGGED[name](text)


def _parse_neper(text: str) -> None:
    from rcunet.services.neper_flags import parse

    parse(text)


#: Services that take flags of their own -> their parser (ValueError on bad flags).
FLAGGED = {"neper": _parse_neper}


class ServiceSet:
    """Running services; ``stop()`` ends them all (also as a context manager)."""

    def __init__(self, services: list[Service]) -> None:
        self.services = services

    def stop(self) -> None:
        for service in reversed(self.services):
            service.stop()

    def __enter__(self) -> ServiceSet:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> list[str]:
        return [f"{s.name} {s.proto}/{s.port}" for s in self.services]


def start_services(host: Host, specs: str | list[ServiceSpec],
                   flags: dict[str, str] | None = None) -> ServiceSet:
    """Start every service (``flags``: a service name -> its own flags, as
    ``{"neper": "-T 2 --num-ports 2"}``); if one cannot bind, the ones started are
    stopped and the OSError propagates (bad flags: ValueError, nothing started)."""
    if isinstance(specs, str):
        specs = parse_specs(specs)
    flags = flags or {}
    check_flags(specs, flags)
    started: list[Service] = []
    try:
        for spec in specs:
            started.append(make_service(host, spec, flags.get(spec.name, "")).start())
    except BaseException:
        ServiceSet(started).stop()
        raise
    return ServiceSet(started)
