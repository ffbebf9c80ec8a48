"""Another revision of this repository, checked out for a side-by-side measurement.

The benchmark scripts measure a change's "before" beside its "after" on one machine in
one run: the before is a git revision checked out in a temporary worktree (detached,
removed afterwards) and run from its source, with that worktree first on ``PYTHONPATH``
so ``import rcunet`` finds it ahead of the installed package.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


class UnknownRevision(Exception):
    """The name is not a revision of the repository."""


@contextlib.contextmanager
def checkout(repository: Path, revision: str) -> Iterator[str]:
    """A detached worktree of REVISION of REPOSITORY; its path, for ``PYTHONPATH``."""
    where = tempfile.mkdtemp(prefix=f"rcunet-{revision}-")
    added = subprocess.run(["git", "-C", str(repository), "worktree", "add", "--detach",
                            "--force", where, revision], capture_output=True, text=True)
    if added.returncode != 0:
        os.rmdir(where)
        raise UnknownRevision(f"{revision!r} is not a revision of {repository}: "
                              f"{added.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["git", "-C", str(repository), "worktree", "remove", "--force", where],
                       capture_output=True)


def source_environment(tree: str) -> dict[str, str]:
    """The environment overrides that run rcunet from the source of TREE (pure Python)."""
    return {"PYTHONPATH": tree, "RCUNET_PURE": "1"}
