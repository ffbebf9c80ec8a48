"""The one clock of a simulation: the network's virtual clock (int ns), which every
clock a program can read is made to show (rcunet/sim/patches.py)."""

from __future__ import annotations

from rcunet.host.clock import VirtualClock

#: The wall-clock time a simulation starts at (2026-01-01T00:00:00Z): a fixed date, so
#: ``time.time()`` and the dates a program prints are the same on every run.
EPOCH_NS = 1_767_225_600 * 1_000_000_000
#: Where the monotonic clocks start (the network's virtual clock starts there too).
START_NS = 1_000_000_000


class SimClock(VirtualClock):
    """The network's virtual clock in a simulation.

    ``virtual`` is False on purpose: a Host reads it to decide whether its sockets may
    block (a deterministic Host refuses, since nothing would wake it).  Here they block,
    and the scheduler makes the block virtual: the Hosts are those of a blocking world
    whose time happens to be simulated."""

    def __init__(self) -> None:
        super().__init__(START_NS)
        # An instance attribute: compiled, VirtualClock keeps ``virtual`` in the instance,
        # where a class attribute of this subclass would not be seen.
        self.virtual = False
        #: Host -> ns its wall clock is ahead (``Simulation.skew``); the monotonic
        #: clocks are never skewed (they measure intervals, which a skew leaves alone).
        self.skews: dict[object, int] = {}

    def wall_ns(self, skew_ns: int = 0) -> int:
        """``time.time_ns()`` in the simulation (``skew_ns``: a Host's clock offset)."""
        return EPOCH_NS + (self._now - START_NS) + skew_ns
