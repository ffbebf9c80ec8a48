"""Unmodified standard-library and third-party code over rcunet sockets (drop-in mode).

Each test runs a server on Host ``b`` in a thread of its own (``patched(b,
this_thread=True)``) and the client on Host ``a`` (``patched(a)``, process-wide) of a
two-host network; payloads are random and checked by SHA-256.

A test that takes ``net`` runs twice, on one test body:

* ``[real]``: a threaded Network on the real clock, real threads in parallel;
* ``[sim]``: the same network under ``rcunet.sim`` (the ``rcunet_sim`` pytest plugin):
  the test's body is a program on Host ``a``, its threads and the Hosts run one at a
  time on virtual time, so no timeout depends on how loaded the machine is.
  ``--rcunet-seed N`` picks the seed (1 by default).

``@pytest.mark.real_time_only("why")`` keeps a test to ``[real]``, saying why it cannot
be simulated (the simulation refuses fork and subprocesses, for example).

The modules whose tests take no ``net`` are not simulated, by their subject:
test_compat_fork.py forks (refused by the simulation); test_compat_run*.py,
test_compat_diagnosis.py and the ``rcunet run`` test of test_compat_descriptors.py start
``rcunet run`` as a child process, whose simulated counterpart, ``rcunet sim``, has its
own tests in tests/sim.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rcunet.host.network import Network

REAL_TIME_ONLY = "real_time_only"


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", f"{REAL_TIME_ONLY}(why): the test's [sim] variant is not made (why: "
        "what the simulation cannot run)")


def pytest_generate_tests(metafunc: Any) -> None:
    if "net" not in metafunc.fixturenames:  # directly or through another fixture
        return
    modes = [pytest.param("real", id="real")]
    marker = metafunc.definition.get_closest_marker(REAL_TIME_ONLY)
    if marker is None:
        modes.append(pytest.param("sim", id="sim", marks=pytest.mark.rcunet_sim(on="a")))
    elif not marker.args or not str(marker.args[0]).strip():
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: {REAL_TIME_ONLY} needs the "
                                "reason the test cannot run simulated")
    metafunc.parametrize("network_mode", modes)


@pytest.fixture
def network_mode() -> str:
    """"real" or "sim" (parametrised by pytest_generate_tests)."""
    return "real"


@pytest.fixture
def payload() -> bytes:
    return os.urandom(1 << 20)


@pytest.fixture
def net(request: Any, network_mode: str) -> Iterator[tuple[Network, Any, Any]]:
    """(network, a, b): a 10.0.0.1/24 fd00::1/64 -- b 10.0.0.2/24 fd00::2/64."""
    if network_mode == "sim":
        simulation = request.getfixturevalue("sim")  # the plugin's: the pair topology
        network = simulation.network
        yield network, network.host_named("a"), network.host_named("b")
        return
    network, a, b = Network.two_hosts(threaded=True)
    network.start()
    yield network, a, b
    network.close()
    leftover = [t.name for t in threading.enumerate() if t.name.startswith(("a-", "b-"))]
    assert not leftover, f"threads left behind: {leftover}"
