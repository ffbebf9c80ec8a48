"""What a Connection tells its host.  Frozen, slotted, named in the past tense; don't subclass.

The events with no fields take ``init=False``: a dataclass's generated ``__init__`` (even
an empty one) runs as interpreted Python under mypyc, ``object``'s does not."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True, init=False)
class Established:
    """The three-way handshake completed; ``send`` data now goes on the wire."""


@dataclass(slots=True, init=False, unsafe_hash=True)
class DataReceived:
    """In-order bytes became readable with ``recv``.  One per segment with data, so its
    ``__init__`` is written out, which mypyc compiles (a dataclass's generated one, and a
    frozen one's ``object.__setattr__`` per field, run interpreted); not frozen for that
    reason alone: nothing writes ``length`` after it is made."""

    length: int  #: how many bytes were added to the receive buffer

    def __init__(self, length: int) -> None:
        self.length = length


@dataclass(frozen=True, slots=True, init=False)
class FinReceived:
    """The peer closed its direction; ``recv`` returns b"" once the buffer is drained."""


@dataclass(frozen=True, slots=True, init=False)
class ResetReceived:
    """An acceptable RST arrived (RFC 9293 §3.10.7.4 second, RFC 5961 §3)."""


@dataclass(frozen=True, slots=True)
class ConnectionFailed:
    """The connection died with an error the application must see (Linux errno)."""

    errno: int  #: ECONNREFUSED, ECONNRESET, ETIMEDOUT, ...


@dataclass(frozen=True, slots=True)
class SendSpaceAvailable:
    """ACKs freed send-buffer space after ``send`` had been refused some bytes."""

    space: int  #: free bytes in the send buffer now


@dataclass(frozen=True, slots=True, init=False)
class TimeWaitEntered:
    """The connection entered TIME-WAIT; the host may move it to its TIME_WAIT table."""


@dataclass(frozen=True, slots=True, init=False)
class Closed:
    """The connection reached CLOSED; the host may drop every reference to it."""


Event = (
    Established
    | DataReceived
    | FinReceived
    | ResetReceived
    | ConnectionFailed
    | SendSpaceAvailable
    | TimeWaitEntered
    | Closed
)
