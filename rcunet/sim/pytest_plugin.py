"""The pytest plugin of ``rcunet sim`` (registered as the ``rcunet_sim`` pytest11 entry
point):

* ``sim``: a fixture, a ``Simulation`` on the test's seed with the two-host ``pair``
  network (a 10.0.0.1 -- b 10.0.0.2; ``topology=``/``impair=`` of the marker change
  it), closed after the test;
* ``@pytest.mark.rcunet_sim(seeds=20)`` runs the test once per seed (``seeds=`` a count
  or the seeds themselves); ``on="a"`` runs the test's body itself as a program on
  that Host, on virtual time, its exception the test's;
* ``--rcunet-seed N`` runs the marked tests with that one seed (the replay);
* a failed test's report names its seed and the command that replays it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Generator, Iterator
from typing import Any

import pytest

from rcunet.sim.simulation import Simulation

MARKER = "rcunet_sim"
#: The seed a test's ``sim`` fixture ran on (the failure report's).
SEED = pytest.StashKey[int]()


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("rcunet-sim")
    group.addoption("--rcunet-seed", type=int, default=None, metavar="N",
                    help="run the rcunet_sim tests with this one seed (replays a failure)")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line(
        "markers", f"{MARKER}(seeds=1, on=None, topology='pair', impair=''): run the "
        "test under rcunet's simulation, once per seed")


def _seeds(marker: Any, forced: int | None) -> list[int]:
    if forced is not None:
        return [forced]
    seeds = marker.kwargs.get("seeds", 1)
    if isinstance(seeds, int):
        return list(range(1, seeds + 1))
    return [int(seed) for seed in seeds]


def pytest_generate_tests(metafunc: Any) -> None:
    marker = metafunc.definition.get_closest_marker(MARKER)
    if marker is None:
        return
    seeds = _seeds(marker, metafunc.config.getoption("rcunet_seed"))
    if "rcunet_seed" not in metafunc.fixturenames:
        metafunc.fixturenames.append("rcunet_seed")
    metafunc.parametrize("rcunet_seed", seeds, ids=[f"seed{s}" for s in seeds])


@pytest.fixture
def rcunet_seed(request: Any) -> int:
    """The seed of this run: the marker's, else ``--rcunet-seed``, else 1 (a test that
    gets the marker from a parameter, as tests/compat's simulated variants do)."""
    forced = request.config.getoption("rcunet_seed")
    return int(getattr(request, "param", 1 if forced is None else forced))


@pytest.fixture
def sim(request: Any, rcunet_seed: int) -> Iterator[Simulation]:
    """A Simulation on the test's seed with the marker's topology (``pair`` by default)."""
    from rcunet.cmd.run_common import build_network, parse_impairment

    marker = request.node.get_closest_marker(MARKER)
    options = marker.kwargs if marker is not None else {}
    request.node.stash[SEED] = rcunet_seed  # for the report, however the test got here
    simulation = Simulation(rcunet_seed)
    build_network(options.get("topology", "pair"), parse_impairment(options.get("impair", "")),
                  network=simulation.network)
    yield simulation
    simulation.close()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: Any) -> bool | None:
    """``on=HOST``: the test's body runs as a program on HOST of the ``sim`` fixture's
    network, and its outcome is the test's."""
    marker = pyfuncitem.get_closest_marker(MARKER)
    if marker is None or marker.kwargs.get("on") is None:
        return None
    funcargs = pyfuncitem.funcargs
    simulation = funcargs.get("sim") or pyfuncitem._request.getfixturevalue("sim")
    host = simulation.network.host_named(marker.kwargs["on"])
    if host is None:
        raise pytest.UsageError(f"{MARKER}(on={marker.kwargs['on']!r}): no such Host")
    arguments = {name: funcargs[name] for name in pyfuncitem._fixtureinfo.argnames}
    program = simulation.spawn(host, lambda: pyfuncitem.obj(**arguments),
                               name=pyfuncitem.name)
    simulation.run()
    if program.exception is not None:
        raise program.exception
    return True


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed and item.get_closest_marker(MARKER) is not None:
        seed = item.stash.get(SEED, None)
        if seed is not None:
            report.sections.append(("rcunet sim", replay_text(item, seed)))


def replay_text(item: Any, seed: int) -> str:
    """The seed and the command that replays it.  String hashes order sets and key
    rcunet's tables, so a byte-identical replay also needs this run's PYTHONHASHSEED:
    named when it was set, asked for when it was random."""
    params = getattr(getattr(item, "callspec", None), "params", {})
    # seeds the marker made are in the test's id: the replay names the test without
    # them (--rcunet-seed makes its one id); any other parameter stays
    node = item.nodeid.split("[", 1)[0] if "rcunet_seed" in params else item.nodeid
    hash_seed = os.environ.get("PYTHONHASHSEED")
    prefix = f"PYTHONHASHSEED={hash_seed} " if hash_seed not in (None, "random") else ""
    text = (f"failed with seed {seed}; replay it with:\n"
            f"  {prefix}pytest {shlex.quote(node)} --rcunet-seed {seed}")
    if not prefix:
        text += ("\n(this run's string hashes were random: run with PYTHONHASHSEED set "
                 "for replays that repeat every byte)")
    return text

