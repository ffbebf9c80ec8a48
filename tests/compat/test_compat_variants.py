"""The two variants of every test that takes ``net`` (tests/compat/conftest.py): ``[real]``
on the real clock with the Hosts' own threads, ``[sim]`` as a program on Host ``a`` of a
simulation (the rcunet_sim plugin), on the seed ``--rcunet-seed`` names."""

from __future__ import annotations

import threading
import time
from typing import Any

from rcunet.sim import scheduler
from rcunet.sim.clock import SimClock


def test_each_variant_runs_where_its_name_says(net: Any, request: Any) -> None:
    network, a, _b = net
    simulated = request.node.callspec.params["network_mode"] == "sim"
    sched = scheduler.active
    assert (sched is not None) is simulated
    if simulated:
        assert sched is not None and sched.me() is not None  # a thread the scheduler runs
        assert threading.current_thread().name == request.node.name  # the program
        assert sched.clock is network.clock
        seed = request.getfixturevalue("rcunet_seed")
        assert request.getfixturevalue("sim").seed == seed
        before = time.monotonic()
        time.sleep(3600)  # virtual: an hour passes at once
        assert time.monotonic() - before == 3600
    else:
        assert threading.current_thread() is threading.main_thread()
        assert a.network is network and not isinstance(network.clock, SimClock)
