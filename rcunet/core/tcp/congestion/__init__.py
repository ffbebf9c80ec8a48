"""Congestion control algorithms, selectable per connection by name (Linux's names)."""

from __future__ import annotations

from rcunet.core.tcp.congestion.base import CongestionControl
from rcunet.core.tcp.congestion.cubic import Cubic
from rcunet.core.tcp.congestion.cubic_params import DEFAULT_PARAMS, CubicParams
from rcunet.core.tcp.congestion.newreno import NewReno
from rcunet.core.tcp.counters import Counters

ALGORITHMS: dict[str, type[CongestionControl]] = {"reno": NewReno, "cubic": Cubic}


def create(name: str, mss: int, initial_cwnd: int, cubic: CubicParams = DEFAULT_PARAMS,
           counters: Counters | None = None) -> CongestionControl:
    """A new connection's controller; ``cubic``: the tcp_cubic module parameters;
    ``counters``: the connection's, for what the algorithm counts (HyStart's finds)."""
    if name == "cubic":
        return Cubic(mss, initial_cwnd, cubic, counters)
    try:
        cls = ALGORITHMS[name]
    except KeyError:
        raise ValueError(f"unknown congestion control {name!r}") from None
    return cls(mss, initial_cwnd)


__all__ = ["ALGORITHMS", "CongestionControl", "Cubic", "CubicParams", "NewReno", "create"]
