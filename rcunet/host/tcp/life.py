"""A TCP socket's life, written here and nowhere else: its steps (``TcpSock.life``), the
teardown the engine asks for (``TcpSock.teardown``), and the table state each engine
state shows (``table_state``).

The steps: one int of bits, each taken once.

The steps are independent of one another (a user may close before or after the engine
finishes; a listener may stop listening, by ``shutdown``, before the user closes it), so
the life is a set of steps rather than a line of states: an int of bits, with the order
the steps may come in written here, in ``REQUIRES``, and nowhere else.

Concurrency: ``life`` is written only by ``advance`` and ``reopen``, under the socket's
``wq`` (a leaf lock: taken inside slock, rskq_lock or the owner section, never around
another lock), so two steps taken at once by different threads never lose one another
and a step is taken by exactly one caller (the one ``advance`` answers True), who then
does the step's work.  Readers take no lock: ``sk.life & STEP`` is one attribute load of
an int (atomic), paired with the store in ``advance``; a reader that must decide
together with other fields holds the lock those fields are guarded by (LISTEN_CLOSED is
taken under the listener's rskq_lock, which its readers hold).

Plain ints, not an ``enum.IntFlag``: ``int & IntFlag`` runs IntFlag's Python-level
``__rand__``, and the transmit path tests FINISHED once per segment.
"""

from __future__ import annotations

import enum
from typing import Any, Final

from mypy_extensions import mypyc_attr

from rcunet.core.tcp import State as CState
from rcunet.core.tcp.timewait import TimeWait
from rcunet.tables.entry import State

#: close(): the user let go of the socket, or the socket was orphaned (a listener's child
#: that nobody will accept, an embryo that died).  Whoever finishes it then forgets it.
USER_CLOSED = 1
#: A listener stopped listening (close, or shutdown(SHUT_RD)): its queues take no more
#: children.  Taken under the listener's rskq_lock.
LISTEN_CLOSED = 2
#: Out of every table, no timer will be armed again, the pinned route is released by the
#: transmitter (tcp_done, tcp_time_wait, or a socket closed before it connected).
FINISHED = 4
#: The layer dropped its reference (``TcpLayer.forget``): the last step.
FORGOTTEN = 8
#: The teardown that took FINISHED is done with the tables: the socket is unhashed and
#: its port released.  FINISHED is taken first (``post`` claims the teardown with it, and
#: the transmitter must see it to release the route), so between the two another thread
#: can see FINISHED while the socket is still in ehash and bhash: whoever decides to
#: forget the socket reads this step, never FINISHED.
UNHASHED = 16

_NAMES = ((USER_CLOSED, "USER_CLOSED"), (LISTEN_CLOSED, "LISTEN_CLOSED"),
          (FINISHED, "FINISHED"), (UNHASHED, "UNHASHED"), (FORGOTTEN, "FORGOTTEN"))

#: The allowed transitions: each step is taken once, and only once the steps listed for it
#: were taken.  The one way back is ``reopen``.
REQUIRES = {
    USER_CLOSED: 0,
    LISTEN_CLOSED: 0,
    FINISHED: 0,
    UNHASHED: FINISHED,
    # the owner's reference goes only when nobody will use the socket again: the user
    # closed it and the engine is done with it, tables included
    FORGOTTEN: USER_CLOSED | FINISHED | UNHASHED,
}
#: tcp_disconnect: connect() after a failed attempt starts over from a socket whose only
#: steps are FINISHED and UNHASHED (the user holds it, it never listened).
REOPENS_FROM = FINISHED | UNHASHED


@mypyc_attr(native_class=False)  # mypyc's native exceptions derive only from a few bases
class LifeError(RuntimeError):
    """A step taken out of order: a bug in the host, never the user's doing."""


def describe(life: int) -> str:
    """``USER_CLOSED|FINISHED``, or ``OPEN`` for a socket that took no step."""
    return "|".join(name for bit, name in _NAMES if life & bit) or "OPEN"


def advance(sk: Any, step: int) -> bool:
    """Take ``step`` in ``sk.life``.  True for the one caller that took it; False when it
    had been taken already (the caller leaves its work to that one).  Takes sk.wq."""
    required = REQUIRES[step]
    with sk.wq:
        life = sk.life
        if life & step:
            return False
        if required & ~life:
            raise LifeError(f"{describe(step)} taken at {describe(life)}: it needs "
                            f"{describe(required)}")
        sk.life = life | step
    return True


def reopen(sk: Any) -> bool:
    """connect() after a failed attempt (tcp_disconnect): FINISHED and UNHASHED are
    cleared.  False while the failed attempt is still tearing down (not UNHASHED yet: a
    connect must not hash the socket while the old teardown still unhashes it).  Takes
    sk.wq."""
    with sk.wq:
        life = sk.life
        if not life & UNHASHED:
            return False
        if life != REOPENS_FROM:
            raise LifeError(f"reopen at {describe(life)}")
        sk.life = 0
    return True


# -- the table state ------------------------------------------------------------------
#: The table state (``SockEntry.state``, what ``ss`` and the tables read) of each engine
#: state: the engine's state machine (``rcunet.core.tcp``) is the one that moves; the
#: socket shows it (``TABLE_STATE[conn.state]``, once per engine call: a subscript, not
#: a call), until FINISHED, after which the tables own it.
TABLE_STATE: Final = {
    CState.CLOSED: State.CLOSE, CState.LISTEN: State.LISTEN, CState.SYN_SENT: State.SYN_SENT,
    CState.SYN_RECEIVED: State.SYN_RECV, CState.ESTABLISHED: State.ESTABLISHED,
    CState.FIN_WAIT_1: State.FIN_WAIT1, CState.FIN_WAIT_2: State.FIN_WAIT2,
    CState.CLOSE_WAIT: State.CLOSE_WAIT, CState.CLOSING: State.CLOSING,
    CState.LAST_ACK: State.LAST_ACK, CState.TIME_WAIT: State.TIME_WAIT,
}


def table_state(state: CState) -> State:
    """The table state a socket whose engine is in ``state`` shows."""
    return TABLE_STATE[state]


# -- the teardown the engine asks for --------------------------------------------------
class Close(enum.Enum):
    """tcp_done: unhash, release the port (the one member, ``CLOSE``)."""

    CLOSE = "tcp_done"


CLOSE: Final = Close.CLOSE
#: What ``TcpSock.teardown`` holds once the engine asked for a teardown: ``CLOSE``, or
#: the state a TIME_WAIT entry keeps (tcp_time_wait).  One field: the kind and the state
#: cannot disagree.
TeardownRequest = TimeWait | Close


def ask_teardown(pending: TeardownRequest | None, asked: TeardownRequest) -> TeardownRequest:
    """The engine asked for ``asked`` while ``pending`` waits for ``post``: TIME_WAIT
    wins over a close (the connection that entered TIME_WAIT has closed as well; the
    close tcp_time_wait implies is its own), and a later TIME_WAIT state replaces an
    earlier one."""
    if asked is CLOSE and pending is not None:
        return pending
    return asked
