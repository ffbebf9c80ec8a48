"""``rcunet run -m MODULE ARGS``: every argument after the module's name is the module's,
options included, as with ``python -m``."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ECHO_TESTS = """\
import hashlib, socket, unittest

class Echo(unittest.TestCase):
    def test_echo_over_b(self):
        data = bytes(range(256)) * 64
        with socket.create_connection(("b", 7), timeout=20) as conn:
            conn.sendall(data)
            got = conn.makefile("rb").read(len(data))
        self.assertEqual(hashlib.sha256(got).hexdigest(), hashlib.sha256(data).hexdigest())

    def test_hostname_is_the_hosts(self):
        self.assertEqual(socket.gethostname(), "a")
"""


def _rcunet(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "rcunet", "run", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def _verbose_lines(stderr: str) -> list[str]:
    return sorted(line.split(" (")[0] + " " + line.rsplit(" ", 1)[1]
                  for line in stderr.splitlines() if line.endswith(" ... ok"))


def test_unittest_verbose_takes_its_own_options(tmp_path: Path) -> None:
    (tmp_path / "test_echo.py").write_text(ECHO_TESTS)
    done = _rcunet("-m", "unittest", "-v", "test_echo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _verbose_lines(done.stderr) == ["test_echo_over_b ok", "test_hostname_is_the_hosts ok"]
    assert "Ran 2 tests" in done.stderr


def test_module_options_that_look_like_rcunets(tmp_path: Path) -> None:
    """``--host`` after ``-m MODULE`` is the module's, not rcunet's."""
    (tmp_path / "show.py").write_text("import socket, sys\n"
                                      "print(socket.gethostname(), sys.argv[1:])\n")
    done = _rcunet("-m", "show", "--host", "b", "-v", "x", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "a ['--host', 'b', '-v', 'x']\n"


def test_module_under_procs(tmp_path: Path) -> None:
    (tmp_path / "test_echo.py").write_text(ECHO_TESTS)
    done = _rcunet("--procs", "-m", "unittest", "-v", "test_echo", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert _verbose_lines(done.stderr) == ["test_echo_over_b ok", "test_hostname_is_the_hosts ok"]


def test_dash_m_without_a_module_is_a_usage_error(tmp_path: Path) -> None:
    done = _rcunet("-m", cwd=tmp_path)
    assert done.returncode == 2
    assert "-m: give a module" in done.stderr
