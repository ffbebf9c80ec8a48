"""``rcunet run``'s diagnosis of a program that hangs: each thread's stack and each
rcunet socket's state (``ss -tuai`` layout, rcunet/control/ss.py), printed on stderr

* on ``--timeout SECONDS`` (then the program is stopped, exit status 124, as
  coreutils' ``timeout`` gives),
* on SIGQUIT (the program goes on, as a JVM's thread dump),
* on Ctrl-C (then the program gets its KeyboardInterrupt as usual),
* when the program has returned but its non-daemon threads stay blocked in rcunet
  socket calls (``stuck_threads``): the interpreter would wait for them for ever.

rcunet's own threads (receive workers, timers, links) are named in one line each; the
program's threads get their whole stack.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import FrameType
from typing import Any, TextIO

import rcunet

TIMEOUT_STATUS = 124
#: how long a returned program's threads may sit in one rcunet call before they are
#: reported as stuck
STUCK_AFTER = 3.0
_RCUNET_DIR = os.path.dirname(os.path.abspath(rcunet.__file__))
_SOCKET_CALL_FILES = tuple(os.path.join(_RCUNET_DIR, "api", name)
                           for name in ("socket.py", "tls.py"))
_THREADING_FILE = os.path.abspath(threading.__file__)
#: This module: its frames on a thread's stack are a signal handler of ours that
#: interrupted the thread (the main thread's, for SIGINT), not the program's code.
_DIAGNOSIS_FILE = os.path.abspath(__file__)


class Diagnosis:
    """Prints the report for ``hosts`` (the Hosts living in this process)."""

    def __init__(self, hosts: list[Any], out: TextIO | None = None) -> None:
        self.hosts = hosts
        self.out = out
        self._lock = threading.Lock()  # one report at a time, never interleaved

    def report(self, why: str) -> None:
        out = self.out or sys.stderr
        with self._lock:
            print(f"rcunet run: {why}", file=out)
            print(_threads_text(), file=out)
            for host in self.hosts:
                print(_sockets_text(host), file=out)
            out.flush()

    def report_bounded(self, why: str, limit: float = 5.0) -> None:
        """``report`` from a thread of its own, waited for at most ``limit`` s: called
        from a signal handler, which may interrupt the main thread while it holds a
        lock the report needs."""
        thread = threading.Thread(target=self.report, args=(why,), name="rcunet-diagnosis",
                                  daemon=True)
        thread.start()
        thread.join(limit)


def _threads_text() -> str:
    frames = sys._current_frames()
    me = threading.get_ident()
    lines: list[str] = []
    internal: list[str] = []
    for thread in threading.enumerate():
        frame = frames.get(thread.ident or -1)
        if frame is None or thread.ident == me:
            continue
        stack = traceback.extract_stack(frame)
        start = next((i for i, entry in enumerate(stack)
                      if _is_program_file(entry.filename)), None)
        if start is None:
            internal.append(thread.name)
            continue
        # from the program's code to where it was when one of our handlers interrupted it
        end = next((i for i in range(start, len(stack))
                    if os.path.abspath(stack[i].filename) == _DIAGNOSIS_FILE), len(stack))
        stack = traceback.StackSummary.from_list(stack[start:end])
        kind = " (daemon)" if thread.daemon else ""
        lines.append(f'Thread "{thread.name}"{kind}, most recent call last:')
        lines.append("".join(traceback.format_list(stack)).rstrip("\n"))
    if internal:
        lines.append(f"rcunet's own threads: {', '.join(sorted(internal))}")
    return "\n".join(lines)


def _is_program_file(filename: str) -> bool:
    path = os.path.abspath(filename)
    return not path.startswith(_RCUNET_DIR + os.sep) and path != _THREADING_FILE \
        and not filename.startswith("<frozen")


def _sockets_text(host: Any) -> str:
    from rcunet.control import snapshot, ss

    try:
        rows = snapshot.sockets(host)["sockets"]
    except Exception as exc:  # a Host closing under us: say so, never fail the report
        return f"# {host.name}: sockets unavailable ({type(exc).__name__}: {exc})"
    if not rows:
        return f"# {host.name}: no sockets"
    return f"# {host.name}: ss -tuai\n{ss.table(rows, show_info=True)}"


def blocked_in_socket_call(frame: FrameType | None) -> FrameType | None:
    """The innermost frame of rcunet's socket API (the only layer that blocks a
    caller) on this stack, or None."""
    while frame is not None:
        if frame.f_code.co_filename in _SOCKET_CALL_FILES:
            found = frame
            while frame is not None and frame.f_code.co_filename in _SOCKET_CALL_FILES:
                found, frame = frame, frame.f_back
            return found
        frame = frame.f_back
    return None


def stuck_threads(threads: list[threading.Thread], waited: dict[int, tuple[int, float]],
                  now: float) -> bool:
    """Whether every one of ``threads`` has sat in the same rcunet socket call for
    STUCK_AFTER seconds.  ``waited``: the caller's memory between polls (thread ident ->
    (the call's frame id, since when))."""
    frames = sys._current_frames()
    all_stuck = bool(threads)
    for thread in threads:
        ident = thread.ident or -1
        call = blocked_in_socket_call(frames.get(ident))
        if call is None:
            waited.pop(ident, None)
            all_stuck = False
            continue
        seen = waited.get(ident)
        if seen is None or seen[0] != id(call):
            waited[ident] = (id(call), now)
            all_stuck = False
        elif now - seen[1] < STUCK_AFTER:
            all_stuck = False
    return all_stuck


class Watch:
    """The SIGQUIT and SIGINT handlers and the ``--timeout`` timer, for the time a
    program runs (``with Watch(...):``)."""

    def __init__(self, diagnosis: Diagnosis, timeout: float | None,
                 planned_interrupt: threading.Event, on_timeout: Callable[[], None]) -> None:
        self.diagnosis = diagnosis
        self.timeout = timeout
        self.planned_interrupt = planned_interrupt
        self.on_timeout = on_timeout
        self._done = threading.Event()
        self._saved: dict[int, Any] = {}

    def __enter__(self) -> Watch:
        if threading.current_thread() is threading.main_thread():
            self._saved[signal.SIGQUIT] = signal.signal(signal.SIGQUIT, self._on_quit)
            self._saved[signal.SIGINT] = signal.signal(signal.SIGINT, self._on_interrupt)
        if self.timeout is not None:
            threading.Thread(target=self._time_out, name="rcunet-timeout",
                             daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        for signum, handler in self._saved.items():
            signal.signal(signum, handler)

    def _on_quit(self, signum: int, frame: FrameType | None) -> None:
        if _in_forked_child():
            return  # the parent reports; the child's copy of the Host has no threads
        threading.Thread(target=self.diagnosis.report, args=("SIGQUIT",),
                         name="rcunet-diagnosis", daemon=True).start()

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        # the --also programs' end stops a server this way: that is no hang
        if not self.planned_interrupt.is_set() and not _in_forked_child():
            self.diagnosis.report_bounded("interrupted (Ctrl-C)")
        raise KeyboardInterrupt

    def _time_out(self) -> None:
        assert self.timeout is not None
        deadline = time.monotonic() + self.timeout
        while not self._done.wait(max(0.0, deadline - time.monotonic())):
            if time.monotonic() >= deadline:
                self.diagnosis.report(f"timed out after {self.timeout:g} s; stopping the "
                                      "program")
                self.on_timeout()
                return


def _in_forked_child() -> bool:
    """A child the program forked (rcunet.api.fork) inherits these handlers: Ctrl-C,
    sent to the whole process group, is reported by the parent alone."""
    from rcunet.api import fork

    return fork.CHILD is not None


def exit_now(status: int, stop: Callable[[], None] = lambda: None,
             limit: float = 10.0) -> None:
    """End the process with ``status`` after ``stop()`` (the children's end, waited for
    at most ``limit`` s).  The program's threads may be blocked anywhere: they are not
    waited for, and the in-process network is left to the process's end rather than
    closed, which would let the program run on (its calls failing) meanwhile."""
    stopper = threading.Thread(target=stop, name="rcunet-stop", daemon=True)
    stopper.start()
    stopper.join(limit)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)
