"""``rcunet.sync.signals``: the main thread's sleep in a compiled socket wait runs the
handler of a signal that came before the sleep began (Ctrl-C in a program blocked in
``recv()``).  Each case runs in a process of its own, whose main thread is the one that
runs signal handlers; nothing here waits for a sleep to be long enough."""

from __future__ import annotations

import subprocess
import sys
import textwrap

PROLOGUE = """\
import os, signal, sys, threading, time, _thread
from rcunet.sync import signals

class Interrupted(Exception):
    'What the SIGUSR1 handler raises.'

def raise_interrupted(signum, frame):
    raise Interrupted

signal.signal(signal.SIGUSR1, raise_interrupted)
gate = _thread.allocate_lock()
gate.acquire()

def signal_from_elsewhere_once_main_is_in(code):
    'SIGUSR1 to a helper thread once the main thread waits in code (its innermost frame).'
    main = threading.get_ident()

    def signal_from_elsewhere():
        while sys._current_frames()[main].f_code is not code:
            time.sleep(0.001)
        signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

    threading.Thread(target=signal_from_elsewhere).start()
"""


def run(body: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROLOGUE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_signal_that_lands_in_another_thread_interrupts_the_main_threads_sleep() -> None:
    """SIGUSR1 to a helper thread: its C handler runs there and only marks the Python
    handler due, waking nothing.  The main thread asleep in the gate runs it within a
    slice and raises its exception (a plain ``gate.acquire()`` would sleep on)."""
    out = run("""
        signal_from_elsewhere_once_main_is_in(signals.acquire_in_main_thread.__code__)
        try:
            signals.acquire_in_main_thread(gate, None)
        except Interrupted:
            print("interrupted")
    """)
    assert out == "interrupted\n"


def test_the_main_thread_takes_its_gate_when_it_opens() -> None:
    out = run("""
        threading.Thread(target=gate.release).start()
        print(signals.acquire_in_main_thread(gate, None))
    """)
    assert out == "True\n"


def test_a_deadline_ends_the_main_threads_sleep() -> None:
    out = run("""
        print(signals.acquire_in_main_thread(gate, time.monotonic() + 0.05), gate.locked())
    """)
    assert out == "False True\n"


def test_the_main_thread_of_a_forked_child_is_the_thread_that_forked() -> None:
    out = run("""
        assert signals.main_ident == threading.get_ident()

        def fork_here():
            pid = os.fork()
            if pid == 0:
                os._exit(0 if signals.main_ident == threading.get_ident() else 1)
            print(os.waitpid(pid, 0)[1])

        thread = threading.Thread(target=fork_here)
        thread.start()
        thread.join()
    """)
    assert out == "0\n"


def test_a_signal_that_lands_in_another_thread_interrupts_the_main_threads_read() -> None:
    """The same for a read: the main thread waiting for a socket to become readable runs
    the handler within a slice (a plain ``recv()`` would sleep on: no EINTR reaches it)."""
    out = run("""
        import socket
        ours, peer = socket.socketpair()
        signal_from_elsewhere_once_main_is_in(signals.wait_readable_in_main_thread.__code__)
        try:
            signals.wait_readable_in_main_thread(ours.fileno())
        except Interrupted:
            print("interrupted")
    """)
    assert out == "interrupted\n"


def test_the_main_thread_reads_once_its_socket_is_readable() -> None:
    out = run("""
        import socket
        ours, peer = socket.socketpair()
        threading.Thread(target=peer.send, args=(b"x",)).start()
        signals.wait_readable_in_main_thread(ours.fileno())
        print(ours.recv(1))
        peer.close()
        signals.wait_readable_in_main_thread(ours.fileno())  # the peer's end closed
        print(ours.recv(1))
    """)
    assert out == "b'x'\nb''\n"
