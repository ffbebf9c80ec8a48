"""``os.fork`` in drop-in mode.

A forked child has a copy of the Host but none of its threads (receive workers,
timers, links): its sockets would never move a byte, and a child that blocks in one
waits for ever, holding the parent's stdout and stderr open.  So drop-in mode refuses
``fork`` at once with an OSError that names the limit; ``subprocess`` (fork and exec in
C) and ``multiprocessing``'s 'spawn' and 'forkserver' start methods are unaffected.
"""

from __future__ import annotations

import errno
import os

_real_fork = os.fork

FORK_LIMIT = ("rcunet drop-in mode: fork() is not supported (a forked child would have a "
              "copy of the Host without its threads, so its sockets could never move a "
              "byte); use threads, subprocess, or multiprocessing's 'spawn' start method")


def fork() -> int:
    raise OSError(errno.ENOSYS, FORK_LIMIT)
