"""rcunet sim: unmodified Python programs on the Hosts of an in-process network, on
virtual time, their threads run one at a time by a seeded scheduler, so that one seed
gives one run (docs/SIMULATION.md)."""

from rcunet.sim.scheduler import (
    BusyLoop,
    Deadlock,
    Interrupted,
    Refused,
    SimulationError,
)
from rcunet.sim.simulation import Program, Simulation

__all__ = ["BusyLoop", "Deadlock", "Interrupted", "Program", "Refused", "Simulation",
           "SimulationError"]
