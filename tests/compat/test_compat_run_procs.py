"""``rcunet run --procs``: the program's Host here, every other Host in its own process."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from compat_support import FETCH, RETRYING_FETCH

from rcunet.link.pcap import read_all
from rcunet.services.http import pattern_sha256

# Runs in the rcunet process itself (drop-in mode), so the Host processes are its own
# children (beside multiprocessing's resource tracker): it reads part of a 20 MB body,
# SIGKILLs them, reads on until the transfer fails, then waits until they are reaped (a
# zombie stays listed as a child).
KILL_THE_SERVER = """\
import glob, http.client, os, signal, time

def children():
    found = set()
    for path in glob.glob("/proc/self/task/*/children"):
        with open(path) as file:
            found.update(int(pid) for pid in file.read().split())
    return found

def host_processes():
    found = set()
    for pid in children():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if b"spawn_main" in cmdline.read():
                    found.add(pid)
        except OSError:
            pass  # gone meanwhile
    return found

conn = http.client.HTTPConnection("b", 80, timeout=3)
conn.request("GET", "/bytes/20971520")
response = conn.getresponse()
got = len(response.read(262144))
victims = host_processes()
for pid in victims:
    os.kill(pid, signal.SIGKILL)
try:
    while True:
        chunk = response.read(65536)
        if not chunk:
            break
        got += len(chunk)
    print("finished", got)
except OSError as exc:
    print("failed", type(exc).__name__, got < 20971520)
deadline = time.monotonic() + 20
while victims & children() and time.monotonic() < deadline:
    time.sleep(0.05)  # a zombie is still a child until it is reaped
print("victims", *sorted(victims))
print("children left", len(victims & children()))
"""


def _rcunet(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rcunet", "run", "--procs", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=180)


def _left_behind() -> dict[str, set[str]]:
    return {"shm": set(os.listdir("/dev/shm")),
            "tmp": {name for name in os.listdir(tempfile.gettempdir())
                    if name.startswith("pymp-")}}


def test_fetch_1mb_from_a_server_process_with_counters_and_pcap(tmp_path: Path) -> None:
    (tmp_path / "fetch.py").write_text(FETCH)
    done = _rcunet("--counters", "--pcap", "run.pcap", "--", "fetch.py",
                   "http://b/bytes/1048576", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1048576", pattern_sha256(1 << 20)]
    frames = read_all(tmp_path / "run.pcap")
    assert len(frames) > 700  # ~725 data segments of 1448 bytes and the ACKs
    stamps = [frame.timestamp_ns for frame in frames]
    assert stamps == sorted(stamps)
    blocks = done.stderr.split("# ")
    server = next(block for block in blocks if block.startswith("b\n"))
    assert "TcpPassiveOpens" in server  # b's counters came back from its process


def test_routed_impaired_three_processes(tmp_path: Path) -> None:
    """a here, r and b each in a process; the r--b link is between two children, so
    its capture comes back from r's process and is merged by time."""
    (tmp_path / "fetch.py").write_text(FETCH)
    done = _rcunet("--topology", "routed", "--impair", "loss=1%,delay=5ms", "--counters",
                   "--pcap", "run.pcap", "--", "fetch.py", "http://b/bytes/300000",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["300000", pattern_sha256(300000)]
    frames = read_all(tmp_path / "run.pcap")
    ip_sources = {frame.frame[26:30] for frame in frames if frame.frame[12:14] == b"\x08\x00"}
    assert bytes([10, 1, 0, 2]) in ip_sources and bytes([10, 2, 0, 2]) in ip_sources
    lines = done.stderr.splitlines()
    retrans = [int(line.split()[1]) for line in lines if line.startswith("TcpRetransSegs")]
    assert retrans and sum(retrans) > 0  # the loss was real (applied in the senders)


def test_star_with_a_server_process_on_the_switch(tmp_path: Path) -> None:
    (tmp_path / "fetch.py").write_text(FETCH)
    done = _rcunet("--topology", "star:3", "--", "fetch.py", "http://h3/bytes/200000",
                   cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["200000", pattern_sha256(200000)]


def test_also_program_runs_in_the_client_process(tmp_path: Path) -> None:
    blob = os.urandom(300000)
    (tmp_path / "blob").write_bytes(blob)
    (tmp_path / "client.py").write_text(RETRYING_FETCH)
    done = _rcunet("--host", "b", "--serve", "", "--also", "a client.py http://b:8000/blob",
                   "-m", "http.server", "8000", "--directory", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{len(blob)} {hashlib.sha256(blob).hexdigest()}" in done.stdout.splitlines()
    assert "Keyboard interrupt received, exiting." in done.stdout


def test_killed_server_process_is_reported_and_reaped(tmp_path: Path) -> None:
    (tmp_path / "kill.py").write_text(KILL_THE_SERVER)
    before = _left_behind()
    done = _rcunet("--", "kill.py", cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert lines[0] == "failed TimeoutError True", done.stdout + done.stderr
    victims = [int(pid) for pid in lines[1].split()[1:]]
    assert len(victims) == 1  # b's process, and no other child
    assert lines[2] == "children left 0"  # reaped while the runner still ran: no zombie
    assert f"host b's process ({victims[0]}) died: killed by SIGKILL" in done.stderr
    assert done.returncode == 1  # the program said 0; a Host's process died
    assert not os.path.exists(f"/proc/{victims[0]}")
    assert _left_behind() == before


def test_bad_host_names(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("print('ok')\n")
    assert _rcunet("--host", "zz", "--", "ok.py", cwd=tmp_path).returncode == 2
    assert _rcunet("--also", "zz ok.py", "--", "ok.py", cwd=tmp_path).returncode == 2
    done = _rcunet("--", "ok.py", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (0, "ok\n")
