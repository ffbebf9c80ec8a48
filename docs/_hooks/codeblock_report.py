"""pytest plugin for scripts/docs: a failing shell block of a page reports the block, its
exit status and what it printed, not only pytest-codeblocks' bare exit status."""

from __future__ import annotations

import subprocess

import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # noqa: ANN001, ANN201 (pytest hook)
    outcome = yield
    report = outcome.get_result()
    error = call.excinfo.value if call.excinfo is not None else None
    if report.failed and isinstance(error, subprocess.CalledProcessError):
        block = getattr(item, "obj", None)
        code = getattr(block, "code", error.cmd)
        out = (error.stdout or b"").decode(errors="replace")[-3000:]
        err = (error.stderr or b"").decode(errors="replace")[-3000:]
        report.longrepr = (f"{item.nodeid}: the block exited {error.returncode}\n"
                           f"--- block\n{code}--- stdout\n{out}\n--- stderr\n{err}")
