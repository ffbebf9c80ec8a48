"""TCP connection states (RFC 9293 §3.3.2) and the transitions the engine may make.

Rule: every state change goes through ``Connection._set_state``, which checks the pair
against ``TRANSITIONS`` below; an unlisted pair is a bug in the engine, not bad input.
It then tells the probes in ``TRANSITION_PROBES`` (Linux's ``inet_sock_set_state``
tracepoint, which tools such as tcplife attach to): a tracer or a test adds one with
``add_transition_probe`` and sees every transition of every connection.
The table is the RFC 9293 Figure 5 diagram plus the arcs RFC 9293 and Linux add
(RST and ABORT from any synchronized state, timeouts, SYN-RECEIVED -> CLOSED for a reset
passive open, which the RFC calls "return to LISTEN": the listener lives in the host).
"""

from __future__ import annotations

import enum
from collections.abc import Callable


class State(enum.Enum):
    CLOSED = "CLOSED"
    LISTEN = "LISTEN"
    SYN_SENT = "SYN-SENT"
    SYN_RECEIVED = "SYN-RECEIVED"
    ESTABLISHED = "ESTABLISHED"
    FIN_WAIT_1 = "FIN-WAIT-1"
    FIN_WAIT_2 = "FIN-WAIT-2"
    CLOSE_WAIT = "CLOSE-WAIT"
    CLOSING = "CLOSING"
    LAST_ACK = "LAST-ACK"
    TIME_WAIT = "TIME-WAIT"

    def __str__(self) -> str:
        return str(self.value)

    # Members are singletons compared by identity, so the identity hash agrees with
    # equality; it is C code, where Enum's own __hash__ (hash of the name) is a Python
    # call on every dict lookup keyed by a state (several per segment).
    __hash__ = object.__hash__

    # Three per-member flags, set once below as plain attributes: the engine reads them
    # several times per segment, and a property on an Enum is a Python call per read.
    #: RFC 9293 §3.3.2: ESTABLISHED and every state after it.
    synchronized: bool
    #: States in which segment text is delivered (RFC 9293 §3.10.7.4, seventh).
    receives_data: bool
    #: The peer's FIN has arrived (CLOSE-WAIT and the states after our FIN and theirs).
    fin_received: bool


for _state in State:
    _state.synchronized = _state not in (State.CLOSED, State.LISTEN, State.SYN_SENT,
                                         State.SYN_RECEIVED)
    _state.receives_data = _state in (State.ESTABLISHED, State.FIN_WAIT_1, State.FIN_WAIT_2)
    _state.fin_received = _state in (State.CLOSE_WAIT, State.CLOSING, State.LAST_ACK,
                                     State.TIME_WAIT)
del _state

S = State
#: (old, new) -> why.  Figure 5 of RFC 9293 plus the resets/timeouts/aborts of §3.10.
TRANSITIONS: dict[tuple[State, State], str] = {
    (S.CLOSED, S.SYN_SENT): "active OPEN: send SYN",
    (S.CLOSED, S.SYN_RECEIVED): "SYN taken from a listener: send SYN,ACK",
    (S.CLOSED, S.ESTABLISHED): "valid SYN cookie ACK at a listener (RFC 4987 §3.6)",
    (S.SYN_SENT, S.SYN_RECEIVED): "simultaneous open: SYN received, send SYN,ACK",
    (S.SYN_SENT, S.ESTABLISHED): "SYN,ACK received: send ACK",
    (S.SYN_SENT, S.CLOSED): "RST (ECONNREFUSED), timeout (ETIMEDOUT) or CLOSE",
    (S.SYN_RECEIVED, S.ESTABLISHED): "ACK of our SYN",
    (S.SYN_RECEIVED, S.CLOSED): "RST, timeout or ABORT",
    (S.ESTABLISHED, S.FIN_WAIT_1): "CLOSE: send FIN (or a CLOSE queued before ESTABLISHED)",
    (S.ESTABLISHED, S.CLOSE_WAIT): "FIN received: send ACK",
    (S.ESTABLISHED, S.CLOSED): "RST received, ABORT or retransmission timeout",
    (S.FIN_WAIT_1, S.FIN_WAIT_2): "ACK of our FIN",
    (S.FIN_WAIT_1, S.CLOSING): "simultaneous close: FIN received before the ACK of ours",
    (S.FIN_WAIT_1, S.CLOSED): "RST, ABORT, timeout, or data after close (RFC 2525 §2.17)",
    # A FIN that also ACKs ours goes FIN-WAIT-1 -> FIN-WAIT-2 (fifth step) -> TIME-WAIT
    # (eighth step): RFC 9293's direct FIN-WAIT-1 -> TIME-WAIT arc is these two.
    (S.FIN_WAIT_2, S.TIME_WAIT): "FIN received: send ACK",
    (S.FIN_WAIT_2, S.CLOSED): "RST, ABORT, orphan timeout (Linux tcp_fin_timeout)",
    (S.CLOSE_WAIT, S.LAST_ACK): "CLOSE: send FIN",
    (S.CLOSE_WAIT, S.CLOSED): "RST, ABORT or retransmission timeout",
    (S.CLOSING, S.TIME_WAIT): "ACK of our FIN",
    (S.CLOSING, S.CLOSED): "RST, ABORT or timeout",
    (S.LAST_ACK, S.CLOSED): "ACK of our FIN, RST, ABORT or timeout",
    (S.TIME_WAIT, S.CLOSED): "2MSL timeout, or RST (RFC 9293; RFC 1337 protection is off)",
}


#: A probe sees ``(old, new)`` after the table accepted the pair.
TransitionProbe = Callable[[State, State], None]
#: The probes every ``Connection._set_state`` calls, in order; empty unless someone traces.
#: Swapped whole (one module-global store) and read once per transition (one global load),
#: so a transition on another thread runs either the old tuple or the new one.
TRANSITION_PROBES: tuple[TransitionProbe, ...] = ()


def add_transition_probe(probe: TransitionProbe) -> None:
    """Attach ``probe``.  Attaching and detaching are read-modify-writes of the tuple: do
    them from one thread at a time (a tracer's set-up, a test), never from a probe."""
    global TRANSITION_PROBES
    TRANSITION_PROBES = (*TRANSITION_PROBES, probe)


def remove_transition_probe(probe: TransitionProbe) -> None:
    """Detach ``probe`` (ValueError if it was not attached)."""
    global TRANSITION_PROBES
    probes = list(TRANSITION_PROBES)
    probes.remove(probe)
    TRANSITION_PROBES = tuple(probes)
