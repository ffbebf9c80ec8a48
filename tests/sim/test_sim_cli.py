"""``rcunet sim`` as a command: a program with loss and delay, --check-determinism,
exit statuses, --until, --counters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from rcunet.services.http import pattern_sha256

FETCH = """\
import hashlib, sys, time, urllib.request
start = time.time()
data = urllib.request.urlopen(sys.argv[1]).read()
print(len(data), hashlib.sha256(data).hexdigest(), round(time.time() - start, 6))
"""


def _sim(*args: str, cwd: Any) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)  # the command sets its own
    return subprocess.run([sys.executable, "-m", "rcunet", "sim", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600, env=env, check=False)


def test_a_fetch_over_loss_is_deterministic_and_the_seed_changes_the_pcap(tmp_path: Any) -> None:
    (tmp_path / "fetch.py").write_text(FETCH)
    url = "http://b/bytes/1048576"
    checked = _sim("--seed", "5", "--impair", "loss=5%,delay=50ms", "--check-determinism",
                   "--", "fetch.py", url, cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "deterministic (seed 5)" in checked.stderr and "identical in two runs" in checked.stderr
    size, digest, _took = checked.stdout.split()
    assert size == "1048576" and digest == pattern_sha256(1 << 20)
    one = _sim("--seed", "5", "--impair", "loss=5%,delay=50ms", "--pcap", "one.pcap",
               "--counters", "--", "fetch.py", url, cwd=tmp_path)
    two = _sim("--seed", "6", "--impair", "loss=5%,delay=50ms", "--pcap", "two.pcap",
               "--", "fetch.py", url, cwd=tmp_path)
    assert one.stdout == checked.stdout  # the same seed, a third time
    assert "simulated seconds per real second" in one.stderr
    assert two.returncode == 0 and two.stdout.split()[:2] == one.stdout.split()[:2]
    assert (tmp_path / "one.pcap").read_bytes() != (tmp_path / "two.pcap").read_bytes()


def test_a_raising_program_exits_1_with_time_and_seed(tmp_path: Any) -> None:
    (tmp_path / "fail.py").write_text("import time\ntime.sleep(30)\nraise KeyError('x')\n")
    done = _sim("--seed", "9", "--", "fail.py", cwd=tmp_path)
    assert done.returncode == 1
    assert "KeyError: 'x'" in done.stderr
    assert "simulated time 30.000000 s (seed 9)" in done.stderr


def test_until_stops_a_program_that_still_runs(tmp_path: Any) -> None:
    (tmp_path / "forever.py").write_text(
        "import time\nwhile True:\n    time.sleep(60)\n    print(int(time.monotonic()))\n")
    done = _sim("--until", "270", "--", "forever.py", cwd=tmp_path)
    assert done.returncode == 124
    assert done.stdout.split() == ["61", "121", "181", "241"]
    assert "--until 270 s reached" in done.stderr


def test_a_module_server_with_an_also_client(tmp_path: Any) -> None:
    (tmp_path / "fetch.py").write_text(FETCH)
    (tmp_path / "index.html").write_bytes(b"<p>hello</p>\n" * 1000)
    done = _sim("--host", "b", "--serve", "", "--impair", "loss=2%,delay=20ms",
                "--also", "a fetch.py http://b:8000/index.html",
                "-m", "http.server", "8000", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("Serving HTTP on")
    assert lines[1].split()[0] == str(13 * 1000)
    assert "Keyboard interrupt received" in done.stdout  # the client ended: as rcunet run


def test_a_bad_faults_file_is_one_line_before_anything_runs(tmp_path: Any) -> None:
    (tmp_path / "hello.py").write_text("print('ran')\n")
    (tmp_path / "faults.txt").write_text("1s crash nowhere\n")
    done = _sim("--faults", "faults.txt", "--", "hello.py", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "faults.txt:1: no host 'nowhere'" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1



@pytest.mark.parametrize("command", ["run", "sim"])
def test_bad_host_or_service_is_one_usage_line(tmp_path: Path, command: str) -> None:
    """``rcunet run`` and ``rcunet sim`` check --host and --serve the same way."""
    (tmp_path / "ok.py").write_text("print('ok')\n")
    for option, said in ((["--host", "zz"], "--host 'zz': the topology has a, b"),
                         (["--serve", "nope:1"], "--serve: unknown service 'nope'")):
        done = subprocess.run([sys.executable, "-m", "rcunet", command, *option, "--",
                               "ok.py"], cwd=tmp_path, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2
        assert done.stderr.startswith(f"rcunet {command}: {said}")
        assert len(done.stderr.strip().splitlines()) == 1


_TICKER = """\
import threading, time
def tick():
    while True:
        time.sleep(0.001)
threading.Thread(target=tick, name='ticker').start()
print('started', flush=True)
while True:
    time.sleep(0.01)
"""


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_ctrl_c_prints_each_threads_stack_and_exits_cleanly(tmp_path: Any, seed: int) -> None:
    """A program that never ends, interrupted once it runs.  The SIGINT often lands while
    the main thread (the driver) is on its way into its wait for the baton, where it no
    longer interrupts that wait: the run must stop all the same (Scheduler._park)."""
    import signal

    (tmp_path / "ticker.py").write_text(_TICKER)
    with subprocess.Popen([sys.executable, "-m", "rcunet", "sim", "--seed", str(seed), "--",
                           "ticker.py"], cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None
        assert child.stdout.readline() == "started\n"  # the run is under way
        child.send_signal(signal.SIGINT)
        try:
            _out, err = child.communicate(timeout=120)  # a bound, not a wait
        except subprocess.TimeoutExpired:
            child.kill()
            raise AssertionError("rcunet sim hung after SIGINT") from None
    assert child.returncode == 130
    assert "interrupted (Ctrl-C)" in err
    assert "thread 'ticker'" in err and "thread 'main'" in err
    assert "in tick" in err
    assert "stopped at simulated time" in err
