"""Faults on a timeline: what ``Simulation.partition``/``heal``/``crash``/``restart``/
``impair``/``skew`` do at a simulated time, and the scenario file that lists them.

A scenario file, one fault a line (``#`` starts a comment; times in s, ms or bare
seconds):

    10s   partition a | b r      # a cut from b and r (links between down, switches split)
    25s   heal                   # every cut link back up
    30s   crash b                # b's threads stop, its sockets vanish without a FIN
    32s   restart b              # b comes back and runs its programs again
    40s   impair a-r loss=10%,delay=100ms   # both directions of the link a--r
    50s   skew a +2.5            # a's wall clock (time.time) 2.5 s ahead

Every line is checked before anything runs: a malformed line, a Host or link the
network lacks, a time before the simulation's present: one line naming the problem
(``FaultError``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from rcunet.host.host import Host
from rcunet.link.memory import Endpoint, PointToPoint, Segment

if TYPE_CHECKING:
    from rcunet.sim.simulation import Simulation

_TIME = re.compile(r"([\d.]+)(s|ms|us|)")
_UNIT = {"": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6}


class FaultError(ValueError):
    """A scenario line or a fault call that cannot be: the message is one line."""


@dataclass(frozen=True)
class Fault:
    at: float  # simulated seconds
    action: Callable[[], None]
    text: str  # what it does, for reports


def parse_time(text: str) -> float:
    match = _TIME.fullmatch(text)
    if not match:
        raise FaultError(f"{text!r} is not a time (10s, 250ms, 1.5)")
    return float(match[1]) * _UNIT[match[2]]


def host_of(sim: Simulation, name: str) -> Host:
    host = sim.network.host_named(name)
    if host is None:
        raise FaultError(f"no host {name!r} (the network has "
                         f"{', '.join(h.name for h in sim.network.hosts)})")
    return host


def link_between(sim: Simulation, left: Host, right: Host) -> PointToPoint:
    for link in sim.network.links:
        if isinstance(link, PointToPoint):
            ends = {hosts_of_endpoint(sim, link.a), hosts_of_endpoint(sim, link.b)}
            if ends == {left, right}:
                return link
    raise FaultError(f"no point-to-point link between {left.name} and {right.name}")


def hosts_of_endpoint(sim: Simulation, endpoint: Any) -> Host | None:
    """The Host whose interface has the endpoint's MAC (each is unique in a Network)."""
    return next((h for h in sim.network.hosts for i in h.interfaces.values()
                 if endpoint.mac is not None and i.mac == endpoint.mac), None)


def iface_host(sim: Simulation, iface: Any) -> Host | None:
    return next((h for h in sim.network.hosts if iface in h.interfaces.values()), None)


def interfaces_on(sim: Simulation, link: PointToPoint) -> list[Any]:
    return [i for h in sim.network.hosts for i in h.interfaces.values()
            if i.mac is not None and i.mac in (link.a.mac, link.b.mac)]


def crossing_links(sim: Simulation, side: set[Host]) -> list[PointToPoint]:
    """The point-to-point links with one end in ``side`` and the other outside it."""
    cut = []
    for link in sim.network.links:
        if isinstance(link, PointToPoint):
            ends = [hosts_of_endpoint(sim, link.a), hosts_of_endpoint(sim, link.b)]
            if (ends[0] in side) != (ends[1] in side):
                cut.append(link)
    return cut


def switch_ports(sim: Simulation) -> list[tuple[Segment, Endpoint, Host]]:
    """Every port of the network's switches, with the Host plugged into it; a switch
    whose ports have no MAC (kind "ip") cannot be partitioned (FaultError)."""
    ports = []
    for link in sim.network.links:
        if isinstance(link, Segment):
            for endpoint in link.endpoints:
                host = hosts_of_endpoint(sim, endpoint)
                if host is None:
                    raise FaultError(f"a partition needs to know the Host on each switch "
                                     f"port; port {endpoint.name} has none (an IP hub)")
                ports.append((link, endpoint, host))
    return ports


def isolate_on_switches(ports: list[tuple[Segment, Endpoint, Host]],
                        sides: list[set[Host]]) -> None:
    """Put each switch port in the VLAN of its Host's place among the partitions in
    force (``sides``): two Hosts share a VLAN exactly when no partition separates them,
    so a switch forwards only between Hosts on one side of every cut."""
    by_segment: dict[Segment, dict[Endpoint, int]] = {}
    for segment, endpoint, host in ports:
        vid = 1 + sum(1 << index for index, side in enumerate(sides) if host in side)
        by_segment.setdefault(segment, {})[endpoint] = vid
    for segment, vlans in by_segment.items():
        segment.set_vlans(vlans)


def parse_scenario(sim: Simulation, path: str) -> list[Fault]:
    """The faults a scenario file lists, every line checked (FaultError naming
    ``file:line`` and the problem)."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError as exc:
        raise FaultError(f"{path}: {exc.strerror}") from None
    faults = []
    for number, raw in enumerate(lines, 1):
        words = raw.split("#", 1)[0].split()
        if not words:
            continue
        try:
            faults.append(_parse_line(sim, words))
        except FaultError as exc:
            raise FaultError(f"{path}:{number}: {exc}") from None
    return faults


def _parse_line(sim: Simulation, words: list[str]) -> Fault:
    from rcunet.cmd.run_common import parse_impairment

    if len(words) < 2:
        raise FaultError("expected 'TIME ACTION ...'")
    at = parse_time(words[0])
    action, rest = words[1], words[2:]
    if action == "partition":
        if "|" not in rest:
            raise FaultError("partition: expected 'partition A B ... | C D ...'")
        bar = rest.index("|")
        side = {host_of(sim, name) for name in rest[:bar]}
        other = {host_of(sim, name) for name in rest[bar + 1:]}
        if not side or not other or side & other:
            raise FaultError("partition: two non-empty, disjoint sets of Hosts")
        return sim.partition(side, at=at)
    if action == "heal" and not rest:
        return sim.heal(at=at)
    if action in ("crash", "restart") and len(rest) == 1:
        host = host_of(sim, rest[0])
        return sim.crash(host, at=at) if action == "crash" else sim.restart(host, at=at)
    if action == "impair" and len(rest) == 2:
        ends = rest[0].split("-")
        if len(ends) != 2:
            raise FaultError(f"impair: {rest[0]!r} is not a link (HOST-HOST)")
        link = link_between(sim, host_of(sim, ends[0]), host_of(sim, ends[1]))
        try:
            config = parse_impairment(rest[1])
        except Exception as exc:  # the CLI's UsageError: its message is the line
            raise FaultError(str(exc)) from None
        return sim.impair(link, config, at=at)
    if action == "skew" and len(rest) == 2:
        host = host_of(sim, rest[0])
        try:
            seconds = float(rest[1])
        except ValueError:
            raise FaultError(f"skew: {rest[1]!r} is not a number of seconds") from None
        return sim.skew(host, seconds, at=at)
    raise FaultError(f"unknown or malformed action {' '.join(words[1:])!r} (partition, "
                     "heal, crash, restart, impair, skew)")

