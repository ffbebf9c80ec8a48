"""The pytest plugin: a marker over seeds finds the seeds where a deliberately racy
read-modify-write over TCP loses an update, names each with its replay command, and the
replay fails the same way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from typing import Any

LOST_UPDATE = '''
import socket, threading
import pytest

state = {"value": 0}


def store():
    with socket.create_server(("0.0.0.0", 6000)) as listener:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=serve_one, args=(conn,), daemon=True).start()


def serve_one(conn):
    with conn, conn.makefile("rwb") as f:
        for line in f:
            cmd, *arg = line.split()
            if cmd == b"GET":
                f.write(b"%d\\n" % state["value"])
            else:
                state["value"] = int(arg[0])
                f.write(b"OK\\n")
            f.flush()


def increment():  # the bug: GET then SET, with nothing to stop another client between
    with socket.create_connection(("10.0.0.2", 6000)) as conn, conn.makefile("rwb") as f:
        f.write(b"GET\\n"); f.flush()
        value = int(f.readline())
        f.write(b"SET %d\\n" % (value + 1)); f.flush()
        assert f.readline() == b"OK\\n"


@pytest.mark.rcunet_sim(seeds=12, impair="loss=10%,delay=20ms,jitter=15ms")
def test_two_increments(sim):
    state["value"] = 0
    a, b = sim.network.host_named("a"), sim.network.host_named("b")
    sim.spawn(b, store, daemon=True)
    sim.spawn(a, increment)
    sim.spawn(a, increment)
    assert sim.run()
    assert state["value"] == 2, f"lost update at {sim.now:.6f} s"


@pytest.mark.rcunet_sim(seeds=[4, 5], on="a")
def test_the_body_runs_on_a_host(sim, rcunet_seed):
    import time
    start = time.monotonic()
    time.sleep(600)
    assert time.monotonic() - start == 600
    assert socket.gethostname() == "a"
'''


def _pytest(tmp_path: Any, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONHASHSEED="0")
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-p", "no:randomly", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600, check=False)


def test_a_seed_that_loses_an_update_is_found_and_replays(tmp_path: Any) -> None:
    (tmp_path / "test_store.py").write_text(LOST_UPDATE)
    search = _pytest(tmp_path, "test_store.py")
    failed = re.findall(r"failed with seed (\d+); replay it with:\n  (.*)", search.stdout)
    passed = sorted({str(n) for n in range(1, 13)} - {seed for seed, _ in failed})
    assert failed and passed, search.stdout  # the race needs some seeds, not all
    seed, command = failed[0]
    assert command == f"PYTHONHASHSEED=0 pytest test_store.py::test_two_increments " \
                      f"--rcunet-seed {seed}"
    first = re.search(rf"\[seed{seed}\].*?(lost update at [\d.]+ s)", search.stdout, re.S)
    assert first is not None
    replay = _pytest(tmp_path, "test_store.py::test_two_increments", "--rcunet-seed", seed)
    assert replay.returncode == 1
    assert "1 failed" in replay.stdout
    assert first.group(1) in replay.stdout  # the same failure at the same simulated time
    good = _pytest(tmp_path, "test_store.py::test_two_increments", "--rcunet-seed",
                   passed[0])
    assert good.returncode == 0, good.stdout


def test_the_marker_runs_the_body_on_a_host(tmp_path: Any) -> None:
    (tmp_path / "test_store.py").write_text(LOST_UPDATE)
    done = _pytest(tmp_path, "test_store.py", "-k", "body", "-rA")
    assert done.returncode == 0, done.stdout
    assert "PASSED test_store.py::test_the_body_runs_on_a_host[seed4]" in done.stdout
    assert "PASSED test_store.py::test_the_body_runs_on_a_host[seed5]" in done.stdout


PARAMETER_MARKED = '''
import time
import pytest


@pytest.fixture
def world(request):
    return request.getfixturevalue("sim")  # asked for on the way, as tests/compat's net


@pytest.mark.parametrize("mode", [pytest.param("sim", marks=pytest.mark.rcunet_sim(on="a"))])
def test_from_a_parameter(world, mode):
    time.sleep(5)
    assert world.seed != 3, f"seed 3 at {time.monotonic():.1f}"
'''


def test_a_marker_from_a_parameter_takes_the_seed_option_and_reports_it(tmp_path: Any) -> None:
    (tmp_path / "test_param.py").write_text(PARAMETER_MARKED)
    assert _pytest(tmp_path, "test_param.py").returncode == 0  # seed 1 by default
    failed = _pytest(tmp_path, "test_param.py", "--rcunet-seed", "3")
    assert failed.returncode == 1
    assert "seed 3 at 6.0" in failed.stdout  # the body ran on virtual time
    assert ("failed with seed 3; replay it with:\n"
            "  PYTHONHASHSEED=0 pytest 'test_param.py::test_from_a_parameter[sim]' "
            "--rcunet-seed 3") in failed.stdout
