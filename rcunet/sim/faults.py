"""Faults on a timeline: what ``Simulation.partition``/``heal``/``crash``/``restart``/
``impair``/``skew`` do at a simulated time, and the scenario file that lists them.

A scenario file, one fault a line (``#`` starts a comment; times in s, ms or bare
seconds):

    10s   partition a | b r      # a cut from b and r (point-to-point links between)
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
from rcunet.link.memory import PointToPoint

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
    """The point-to-point links with one end in ``side`` and the other outside it; a
    switch with ports on both sides cannot be cut (FaultError)."""
    cut = []
    for link in sim.network.links:
        if isinstance(link, PointToPoint):
            ends = [hosts_of_endpoint(sim, link.a), hosts_of_endpoint(sim, link.b)]
            if (ends[0] in side) != (ends[1] in side):
                cut.append(link)
        else:
            raise FaultError("a partition cuts point-to-point links; this network has a "
                             "switch (crash a Host to isolate it instead)")
    return cut


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

