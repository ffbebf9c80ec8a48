"""``rcunet run``: unmodified scripts and modules on a Host of an in-process network."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from compat_support import FETCH, RETRYING_FETCH

from rcunet.link.pcap import read_all
from rcunet.services.http import pattern_sha256

ASYNCIO_AND_THREADS = """\
import asyncio, hashlib, socket, threading
data = bytes(range(256)) * 400

async def echo_once():
    reader, writer = await asyncio.open_connection("b", 7)
    writer.write(data)
    await writer.drain()
    got = await reader.readexactly(len(data))
    writer.close()
    await writer.wait_closed()
    return got

def threaded(results):
    with socket.create_connection(("b", 7), timeout=20) as conn:
        conn.sendall(data)
        results.append(conn.makefile("rb").read(len(data)))

results = []
workers = [threading.Thread(target=threaded, args=(results,)) for _ in range(4)]
for worker in workers:
    worker.start()
got = asyncio.run(echo_once())
for worker in workers:
    worker.join()
print(len({hashlib.sha256(x).hexdigest() for x in [got, *results, data]}), len(results))
"""


def _rcunet(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rcunet", "run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_script_downloads_over_lossy_delayed_link(tmp_path: Path) -> None:
    (tmp_path / "fetch.py").write_text(FETCH)
    done = _rcunet("--impair", "loss=2%,delay=20ms", "--counters", "--pcap", "run.pcap",
                   "--", "fetch.py", "http://b/bytes/1048576", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    frames = read_all(tmp_path / "run.pcap")
    assert len(frames) > 1000  # ~750 data segments of 1448 bytes, their ACKs, the lost
    assert done.stdout.split() == ["1048576", pattern_sha256(1 << 20)]
    retransmitted = [line for line in done.stderr.splitlines()
                     if line.startswith("TcpRetransSegs")]
    assert retransmitted and int(retransmitted[0].split()[1]) > 0  # the loss was real


def test_module_http_server_answers_a_client_host(tmp_path: Path) -> None:
    blob = os.urandom(300000)
    (tmp_path / "blob").write_bytes(blob)
    (tmp_path / "client.py").write_text(RETRYING_FETCH)
    done = _rcunet("--host", "b", "--serve", "", "--also", "a client.py http://b:8000/blob",
                   "-m", "http.server", "8000", "--directory", str(tmp_path), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"{len(blob)} {hashlib.sha256(blob).hexdigest()}" in done.stdout.splitlines()
    assert "Keyboard interrupt received, exiting." in done.stdout  # ended as on Ctrl-C
    assert '"GET /blob HTTP/1.1" 200' in done.stderr  # http.server's own log line


def test_bad_command_lines(tmp_path: Path) -> None:
    assert _rcunet("--", "missing.py", cwd=tmp_path).returncode == 2
    (tmp_path / "ok.py").write_text("print('ok')\n")
    assert _rcunet("--impair", "loss=200%", "--", "ok.py", cwd=tmp_path).returncode == 2
    assert _rcunet("--host", "zz", "--", "ok.py", cwd=tmp_path).returncode == 2
    (tmp_path / "exit3.py").write_text("import sys; sys.exit(3)\n")
    assert _rcunet("--", "exit3.py", cwd=tmp_path).returncode == 3


def test_program_threads_and_asyncio(tmp_path: Path) -> None:
    """A program's own threads and its asyncio loop all get sockets on its Host."""
    (tmp_path / "mixed.py").write_text(ASYNCIO_AND_THREADS)
    done = _rcunet("--", "mixed.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "4"]  # one distinct hash: all echoes intact


def test_topology_file_with_router_and_names(tmp_path: Path) -> None:
    topology = {
        "hosts": [{"name": "client"}, {"name": "gw", "forwarding": True}, {"name": "web"}],
        "links": [{"ends": ["client", "gw"], "addresses": [["10.1.0.2/24"], ["10.1.0.1/24"]]},
                  {"ends": ["gw", "web"], "addresses": [["10.2.0.1/24"], ["10.2.0.2/24"]],
                   "impair": "delay=5ms"}],
        "routes": [{"host": "client", "prefix": "default", "via": "10.1.0.1"},
                   {"host": "web", "prefix": "default", "via": "10.2.0.1"}],
        "names": {"www.example": ["10.2.0.2"]},
    }
    (tmp_path / "net.json").write_text(json.dumps(topology))
    (tmp_path / "fetch.py").write_text(FETCH)
    done = _rcunet("--topology", "net.json", "--", "fetch.py",
                   "http://www.example/bytes/100000", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["100000", pattern_sha256(100000)]
