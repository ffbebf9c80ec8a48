"""``os.fork`` in drop-in mode fails at once with an OSError naming the limit, and no
child process is ever left behind (multiprocessing's fork start method included)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

FORKING = """\
import errno, multiprocessing, os, subprocess, sys
try:
    os.fork()
except OSError as exc:
    print("fork", errno.errorcode[exc.errno], "fork() is not supported" in str(exc))
try:
    with multiprocessing.get_context("fork").Pool(2) as pool:
        pool.map(abs, [-1])
except OSError as exc:
    print("pool", errno.errorcode[exc.errno])
# fork + exec in C is not os.fork: subprocess works
print("subprocess", subprocess.run([sys.executable, "-c", "print(6 * 7)"],
                                   capture_output=True, text=True).stdout.strip())
print("children", multiprocessing.active_children())
"""


def test_fork_fails_at_once_naming_the_limit(tmp_path: Path) -> None:
    (tmp_path / "forking.py").write_text(FORKING)
    done = subprocess.run([sys.executable, "-m", "rcunet", "run", "--", "forking.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["fork ENOSYS True", "pool ENOSYS", "subprocess 42",
                                        "children []"]
