"""``rcunet run``'s diagnosis of a hung program: ``--timeout`` (exit 124), SIGQUIT and
Ctrl-C print each thread's stack and each socket's state in ``ss -tuai`` layout; a
program that returns with threads blocked in rcunet socket calls is reported, not left
hanging."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

HANG = """\
import socket, threading
listener = socket.create_server(("0.0.0.0", 9000))

def wait_forever():
    conn, _ = listener.accept()

threading.Thread(target=wait_forever, name="acceptor").start()
client = socket.create_connection(("b", 7))
print("ready", flush=True)
client.recv(10)
"""

RETURNS_WITH_A_BLOCKED_THREAD = """\
import socket, threading
client = socket.create_connection(("b", 9))

def read_forever():
    client.recv(10)

threading.Thread(target=read_forever, name="reader").start()
print("main returns", flush=True)
"""

SS_HEADER = r"State +Recv-Q Send-Q Local Address:Port  Peer Address:Port Process"


def _sigint_as_on_a_terminal() -> None:
    """The run and the children it forks get SIGINT as a terminal gives it: a test run
    started as a background job of a non-interactive shell (a CI runner may be one)
    passes SIGINT on ignored, and a forked child would then outlive the group's Ctrl-C."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _command(*args: str) -> list[str]:
    return [sys.executable, "-m", "rcunet", "run", *args]


def _check_hang_report(stderr: str, why: str) -> None:
    assert f"rcunet run: {why}" in stderr
    main = stderr.index('Thread "MainThread", most recent call last:')
    assert 'File "hang.py", line 10, in <module>\n    client.recv(10)' in stderr[main:]
    acceptor = stderr.index('Thread "acceptor", most recent call last:')
    assert "conn, _ = listener.accept()" in stderr[acceptor:]
    assert "rcunet's own threads: a-rx0, a-timer," in stderr
    lines = stderr[stderr.index("# a: ss -tuai\n"):].splitlines()
    # The State column is as wide as its longest state, and b's echo service closes a
    # connection idle for 60 s (services/base.py): on a slow machine the report may
    # come after that, with the client in CLOSE-WAIT.
    assert re.fullmatch(SS_HEADER, lines[1]), "\n".join(lines)
    assert re.fullmatch(r"LISTEN +0 +128 +0\.0\.0\.0:9000 +0\.0\.0\.0:\* *", lines[2])
    assert re.fullmatch(r"(ESTAB|CLOSE-WAIT) +0 +0 +10\.0\.0\.1:\d+ +10\.0\.0\.2:7 *",
                        lines[3]), "\n".join(lines)
    assert re.match(r"\t cubic rto:\d+", lines[4])  # ss -i's line


def test_timeout_prints_stacks_and_sockets_and_exits_124(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(HANG)
    started = time.monotonic()
    done = subprocess.run(_command("--timeout", "2", "--", "hang.py"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 124, done.stderr
    assert time.monotonic() - started < 60  # stopped, not left to the test's timeout
    _check_hang_report(done.stderr, "timed out after 2 s; stopping the program")


def test_sigquit_reports_and_ctrl_c_reports_then_interrupts(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(HANG)
    proc = subprocess.Popen(_command("--", "hang.py"), cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            preexec_fn=_sigint_as_on_a_terminal)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        seen = _quit_until_blocked(proc)
        _check_hang_report(seen, "SIGQUIT")
        assert proc.poll() is None  # SIGQUIT leaves the program running
        proc.send_signal(signal.SIGINT)
        status = proc.wait(60)
        rest = proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
    assert "rcunet run: interrupted (Ctrl-C)" in rest
    assert 'Thread "MainThread", most recent call last:' in rest
    assert status != 0


def _quit_until_blocked(proc: subprocess.Popen[str], patience: float = 120.0) -> str:
    """SIGQUIT's report once both of hang.py's threads sit in their calls: "ready" comes
    before the main thread reaches recv(), so a report may catch it a line early."""
    assert proc.stderr is not None
    deadline = time.monotonic() + patience
    while True:
        proc.send_signal(signal.SIGQUIT)
        seen = _read_until(proc.stderr, "udp ")  # the end of b's table
        if "client.recv(10)" in seen and "listener.accept()" in seen:
            return seen
        assert time.monotonic() < deadline, f"never blocked in recv and accept:\n{seen}"


def _read_until(stream: object, marker: str) -> str:
    """stderr lines up to the first of b's UDP rows (the report's last table)."""
    text = ""
    while True:
        line = stream.readline()  # type: ignore[attr-defined]
        assert line, f"stderr ended before {marker!r}:\n{text}"
        text += line
        if "# b: ss -tuai" in text and line.split()[:1] == [marker.strip()]:
            return text


def test_returned_program_with_blocked_threads_is_reported(tmp_path: Path) -> None:
    (tmp_path / "returns.py").write_text(RETURNS_WITH_A_BLOCKED_THREAD)
    done = subprocess.run(_command("--", "returns.py"), cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.stdout == "main returns\n"
    assert done.returncode == 1, done.stderr
    assert ('rcunet run: the program returned, but its threads "reader" wait in rcunet '
            "socket calls that nothing will complete") in done.stderr
    assert 'File "returns.py", line 5, in read_forever' in done.stderr
    assert re.search(r"ESTAB +0 +0 +10\.0\.0\.1:\d+ +10\.0\.0\.2:9 ", done.stderr)


def test_timeout_under_procs(tmp_path: Path) -> None:
    (tmp_path / "hang.py").write_text(HANG)
    done = subprocess.run(_command("--procs", "--timeout", "2", "--", "hang.py"),
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 124, done.stderr
    assert "rcunet run: timed out after 2 s" in done.stderr
    assert 'File "hang.py", line 10, in <module>' in done.stderr


def test_bad_timeout_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "ok.py").write_text("print('ok')\n")
    done = subprocess.run(_command("--timeout", "0", "--", "ok.py"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    done = subprocess.run(_command("--timeout", "30", "--", "ok.py"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout) == (0, "ok\n")


FORKED_AND_WAITING = """\
import os, socket
conn = socket.create_connection(("b", 9))
pid = os.fork()
if pid == 0:
    conn.recv(10)  # the discard service never answers
    os._exit(0)
print("ready", flush=True)
conn.recv(10)
"""


def test_ctrl_c_to_the_group_is_reported_once(tmp_path: Path) -> None:
    """Ctrl-C reaches the forked child too; only the parent reports, and the parent's
    program gets its KeyboardInterrupt in ``recv()`` even when the signal lands while
    the main thread runs compiled code on its way to sleep (rcunet.sync.signals)."""
    (tmp_path / "forked.py").write_text(FORKED_AND_WAITING)
    proc = subprocess.Popen(_command("--", "forked.py"), cwd=tmp_path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True, preexec_fn=_sigint_as_on_a_terminal)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "ready\n"
        os.killpg(proc.pid, signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert err.count("rcunet run: interrupted (Ctrl-C)") == 1
    assert proc.returncode == 130
    # the main thread is shown where the program was (its print or its recv: the signal
    # follows "ready" at once), not in our signal handler
    main = err.index('Thread "MainThread", most recent call last:')
    assert 'File "forked.py", line ' in err[main:]
    assert "run_diagnosis.py" not in err
