"""Helpers of the simulation tests: a two-host simulated network and payload hashing."""

from __future__ import annotations

import hashlib
from typing import Any

from rcunet.link.impair import ImpairmentConfig
from rcunet.sim import Simulation

LOSSY = ImpairmentConfig(loss=0.05, delay=50_000_000)  # 5% loss, 50 ms each way


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def two_hosts(seed: int = 1, impair: ImpairmentConfig | None = None,
              **kwargs: Any) -> tuple[Simulation, Any, Any]:
    sim = Simulation(seed, **kwargs)
    a, b = sim.network.host("a"), sim.network.host("b")
    sim.network.link(a, b, ["10.0.0.1/24", "fd00::1/64"], ["10.0.0.2/24", "fd00::2/64"],
                     impair=impair)
    return sim, a, b
