"""A TCP socket's life (``TcpSock.life``): one int of four steps, each taken once.

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

from typing import Any

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
