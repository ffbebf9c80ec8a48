"""CPU sets as Linux writes them (``0-2,5``), and where ``--target procs`` puts its two
processes (``--procs-cpus``).  Imports nothing of rcunet: neper's option checks and the
procs target both use it."""

from __future__ import annotations

from collections.abc import Sequence


def placement(spec: str, allowed: Sequence[int]) -> tuple[tuple[int, ...] | None,
                                                          tuple[int, ...] | None]:
    """``--procs-cpus``: (client CPUs, server CPUs), None for "not placed".  ``spread``
    halves ``allowed`` (one CPU: not placed); ``none``; or ``CLIENT:SERVER`` CPU lists,
    each a subset of ``allowed`` (ValueError otherwise)."""
    if spec == "none" or (spec == "spread" and len(allowed) < 2):
        return None, None
    if spec == "spread":
        half = len(allowed) // 2
        return tuple(allowed[:half]), tuple(allowed[half:])
    sides = spec.split(":")
    if len(sides) != 2:
        raise ValueError(f"--procs-cpus {spec!r}: spread, none or CLIENT:SERVER "
                         "CPU lists (0:1, 0-1:2-3)")
    client, server = (parse_cpu_list(side) for side in sides)
    outside = sorted((set(client) | set(server)) - set(allowed))
    if outside:
        raise ValueError(f"--procs-cpus {spec!r}: CPUs {outside} are not allowed "
                         f"(allowed: {cpu_list(allowed)})")
    return client, server


def parse_cpu_list(text: str) -> tuple[int, ...]:
    """A CPU list as Linux writes them (``0-2,5``) as a sorted tuple; ValueError when
    malformed or empty."""
    cpus: set[int] = set()
    for part in text.split(","):
        first, dash, last = part.partition("-")
        if (not first.isdigit() or (dash and not last.isdigit())
                or (dash and int(last) < int(first))):
            raise ValueError(f"CPU list {text!r}: expected numbers and ranges, as 0-2,5")
        cpus.update(range(int(first), int(last if dash else first) + 1))
    if not cpus:
        raise ValueError(f"CPU list {text!r} is empty")
    return tuple(sorted(cpus))


def cpu_list(cpus: Sequence[int]) -> str:
    """The inverse of ``parse_cpu_list``: ``(0, 1, 2, 5)`` -> ``0-2,5``."""
    runs: list[list[int]] = []
    for cpu in sorted(cpus):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)
