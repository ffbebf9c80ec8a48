"""Forked children in drop-in mode keep working sockets, served by the parent's Host
(rcunet.api.fork): socketserver's Forking servers, a multiprocessing pool sharing one
listener, a child's death releasing its references, the child never outliving its
parent; and no process is left behind."""

from __future__ import annotations

import _thread
import errno
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from rcunet.api import fork

FORKING_TCP = """\
import hashlib, os, socket, socketserver, threading

class Handler(socketserver.StreamRequestHandler):
    def handle(self):
        data = self.rfile.readline()
        self.wfile.write(hashlib.sha256(data).hexdigest().encode() + b" %d\\n" % os.getpid())

server = socketserver.ForkingTCPServer(("0.0.0.0", 8000), Handler)
threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
pids, good = set(), 0
for i in range(20):
    with socket.create_connection(("a", 8000), timeout=20) as conn:
        line = b"request %d\\n" % i
        conn.sendall(line)
        digest, pid = conn.makefile("rb").readline().split()
        good += digest.decode() == hashlib.sha256(line).hexdigest()
        pids.add(int(pid))
server.shutdown()
server.server_close()
print(good, len(pids), os.getpid() in pids, server.active_children)
"""

FORKING_UDP = """\
import hashlib, os, socket, socketserver, threading

class Handler(socketserver.DatagramRequestHandler):
    def handle(self):
        digest = hashlib.sha256(self.rfile.read()).hexdigest().encode()
        self.wfile.write(digest + b" %d" % os.getpid())

server = socketserver.ForkingUDPServer(("0.0.0.0", 8001), Handler)
threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}).start()
client = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
client.settimeout(20)
pids, good = set(), 0
for i in range(20):
    client.sendto(b"datagram %d" % i, ("a", 8001))
    digest, pid = client.recv(200).split()
    good += digest.decode() == hashlib.sha256(b"datagram %d" % i).hexdigest()
    pids.add(int(pid))
server.shutdown()
server.server_close()
print(good, len(pids), os.getpid() in pids, server.active_children)
"""

POOL = """\
import hashlib, multiprocessing, os, socket

LISTENER = socket.create_server(("0.0.0.0", 8002))

def serve_one(_):
    conn, _peer = LISTENER.accept()
    with conn:
        data = conn.makefile("rb").readline()
        conn.sendall(hashlib.sha256(data).hexdigest().encode() + b"\\n")
    return os.getpid()

good = 0
with multiprocessing.get_context("fork").Pool(4) as pool:
    served = pool.map_async(serve_one, range(20))
    for i in range(20):
        with socket.create_connection(("a", 8002), timeout=20) as conn:
            conn.sendall(b"job %d\\n" % i)
            answer = conn.makefile("rb").readline().strip().decode()
            good += answer == hashlib.sha256(b"job %d\\n" % i).hexdigest()
    workers = set(served.get(60))
print(good, 1 <= len(workers) <= 4, os.getpid() in workers, multiprocessing.active_children())
"""

CHILD_DIES = """\
import errno, os, signal, socket, threading

listener = socket.create_server(("0.0.0.0", 8003))
got, arrived = [], threading.Event()

def serve():
    conn, _ = listener.accept()
    while True:
        data = conn.recv(100)
        got.append(data)
        if not data or b"".join(got).endswith(b"ENOSYS\\n"):
            arrived.set()  # all the child sends (it may come in one segment or two)
        if not data:
            return

server = threading.Thread(target=serve)
server.start()
conn = socket.create_connection(("a", 8003), timeout=20)
pid = os.fork()
if pid == 0:
    conn.sendall(b"from the child\\n")
    try:
        os.fork()
    except OSError as exc:
        conn.sendall(errno.errorcode[exc.errno].encode() + b"\\n")
    signal.pause()  # holds its descriptor until killed
conn.close()  # the parent's descriptor: the child's keeps the connection open
arrived.wait(60)
print(server.is_alive())
os.kill(pid, signal.SIGKILL)
os.waitpid(pid, 0)
server.join(20)
print(b"".join(got), got[-1])
"""

PARENT_DIES = """\
import os, socket, sys, time
conn = socket.create_connection(("b", 9), timeout=None)
pid = os.fork()
if pid == 0:
    print("child", os.getpid(), flush=True)
    conn.recv(10)  # the discard service never answers
    sys.exit(0)
time.sleep(600)
"""


def _run(tmp_path: Path, name: str, program: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / name).write_text(program)
    done = subprocess.run([sys.executable, "-m", "rcunet", "run", "--", name], cwd=tmp_path,
                          capture_output=True, text=True, timeout=180)
    assert _processes_running(tmp_path / name) == []  # nothing left behind
    return done


def _processes_running(script: Path) -> list[int]:
    """Processes whose command line names ``script`` (forked children share it)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as file:
                    cmdline = file.read().split(b"\0")
                cwd = os.readlink(f"/proc/{entry}/cwd")
            except OSError:
                continue
            if script.name.encode() in cmdline and cwd == str(script.parent):
                found.append(int(entry))
    return found


def test_forking_tcp_server_serves_20_clients(tmp_path: Path) -> None:
    done = _run(tmp_path, "forking_tcp.py", FORKING_TCP)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "20 20 False set()\n"  # 20 digests right, 20 children, reaped


def test_forking_udp_server_serves_20_clients(tmp_path: Path) -> None:
    done = _run(tmp_path, "forking_udp.py", FORKING_UDP)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "20 20 False set()\n"


def test_multiprocessing_pool_shares_one_listener(tmp_path: Path) -> None:
    done = _run(tmp_path, "pool.py", POOL)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "20 True False []\n"


def test_child_death_releases_its_reference(tmp_path: Path) -> None:
    """The connection outlives the parent's close while the child holds it, and ends
    (EOF at the server) when the child is killed; a child cannot fork again."""
    done = _run(tmp_path, "child_dies.py", CHILD_DIES)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "True\nb'from the child\\nENOSYS\\n' b''\n"


def test_child_never_outlives_its_parent(tmp_path: Path) -> None:
    (tmp_path / "parent_dies.py").write_text(PARENT_DIES)
    proc = subprocess.Popen([sys.executable, "-m", "rcunet", "run", "--", "parent_dies.py"],
                            cwd=tmp_path, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    word, pid = proc.stdout.readline().split()
    assert word == "child"
    proc.kill()
    proc.wait(30)
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/{pid}") and _state(pid) != "Z" and \
            time.monotonic() < deadline:
        time.sleep(0.05)  # polling for the child's end, not waiting for time to pass
    assert not os.path.exists(f"/proc/{pid}") or _state(pid) == "Z"
    assert f"rcunet: forked child {pid}: its parent" in proc.stderr.read()


def _state(pid: str) -> str:
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def test_a_call_that_finds_the_parent_gone_says_so_once(capfd: pytest.CaptureFixture[str]
                                                        ) -> None:
    """The thread that waits on the parent's end and a call whose connection closed race
    to see the parent's end; the call's thread may end the process first (its error
    uncaught), so whichever sees it says so on stderr, and only once."""
    nobody = b"\0rcunet-test-no-parent-%d" % os.getpid()  # an abstract name nobody binds
    channel = fork._Channel(nobody, host=None, parent=4242)
    for _ in range(2):
        with pytest.raises(OSError) as caught:
            channel.request(("new", socket.AF_INET, socket.SOCK_STREAM))
        assert caught.value.errno == errno.ENETDOWN
    said = capfd.readouterr().err
    assert said == (f"rcunet: forked child {os.getpid()}: its parent 4242, which served its "
                    f"sockets, has ended; exiting\n")
    channel.parent_gone()
    assert capfd.readouterr().err == ""


def test_an_interrupted_call_leaves_no_reply_for_the_next_one() -> None:
    """Ctrl-C while the child's main thread waits for a reply: the call raises
    KeyboardInterrupt (the wait hears it although no EINTR comes: ``interrupt_main``
    only marks the handler due), and the thread's next call goes out on a new
    connection, where no late reply of the interrupted call can answer it."""
    address = b"\0rcunet-test-fake-parent-%d" % os.getpid()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(2)
    connections: list[socket.socket] = []

    def fake_parent() -> None:
        try:
            first, _ = listener.accept()
            connections.append(first)
            assert fork._recv(first)[0] == ("hello", os.getpid())
            assert fork._recv(first)[0] == ("attr", 1, "never answered")
            _thread.interrupt_main()  # Ctrl-C while the child waits
            if first.recv(1 << 16):  # not EOF: the next call came on this connection
                fork._send(first, ("value", "the late reply"))  # and takes this reply
                return
            second, _ = listener.accept()
            connections.append(second)
            assert fork._recv(second)[0] == ("hello", os.getpid())
            assert fork._recv(second)[0] == ("attr", 1, "answered")
            fork._send(second, ("value", "its own reply"))
        finally:
            for conn in (listener, *connections):  # a child still waiting reads EOF
                conn.close()

    server = threading.Thread(target=fake_parent)
    server.start()
    try:
        channel = fork._Channel(address, host=None, parent=os.getppid())
        with pytest.raises(KeyboardInterrupt):
            channel.request(("attr", 1, "never answered"))
        assert channel.request(("attr", 1, "answered")) == "its own reply"
    finally:
        server.join(30)
    assert not server.is_alive() and len(connections) == 2
