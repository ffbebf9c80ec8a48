"""``rcunet.sync.signals.acquire``: the sleep of a compiled wait runs the handler of a
signal that came before the sleep began (Ctrl-C in a program blocked in ``recv()``).
Each case runs in a process of its own, whose main thread is the one that runs signal
handlers; nothing here waits for a sleep to be long enough."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

PROLOGUE = """\
import signal, threading, time, _thread
from rcunet.sync import signals

class Interrupted(Exception):
    pass

def raise_interrupted(signum, frame):
    raise Interrupted

signal.signal(signal.SIGUSR1, raise_interrupted)
gate = _thread.allocate_lock()
gate.acquire()
"""


def run(body: str) -> str:
    done = subprocess.run([sys.executable, "-c", PROLOGUE + textwrap.dedent(body)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_signal_that_lands_in_another_thread_interrupts_the_main_threads_sleep() -> None:
    """SIGUSR1 to a helper thread: its C handler runs there and only marks the Python
    handler due, waking nothing.  The main thread asleep in ``acquire`` runs it within a
    slice and raises its exception."""
    out = run("""
        import sys
        main = threading.get_ident()

        def signal_from_elsewhere():
            # once the main thread sleeps in acquire (its innermost Python frame)
            while sys._current_frames()[main].f_code is not signals.acquire.__code__:
                time.sleep(0.001)
            signal.pthread_kill(threading.get_ident(), signal.SIGUSR1)

        threading.Thread(target=signal_from_elsewhere).start()
        try:
            signals.acquire(gate, None)
        except Interrupted:
            print("interrupted")
    """)
    assert out == "interrupted\n"


def test_the_main_thread_takes_its_gate_when_it_opens() -> None:
    out = run("""
        threading.Thread(target=gate.release).start()
        print(signals.acquire(gate, None))
    """)
    assert out == "True\n"


@pytest.mark.parametrize("where", ["main", "other"])
def test_a_deadline_ends_the_sleep(where: str) -> None:
    out = run(f"""
        result = []
        def sleep():
            result.append(signals.acquire(gate, time.monotonic() + 0.05))
        if {where!r} == "main":
            sleep()
        else:
            thread = threading.Thread(target=sleep)
            thread.start()
            thread.join()
        print(result, gate.locked())
    """)
    assert out == "[False] True\n"


def test_another_thread_takes_its_gate_when_it_opens() -> None:
    out = run("""
        result = []
        thread = threading.Thread(target=lambda: result.append(signals.acquire(gate, None)))
        thread.start()
        gate.release()
        thread.join()
        print(result)
    """)
    assert out == "[True]\n"
