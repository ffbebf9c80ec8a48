"""Names every part of the TCP engine shares: the control bits, the sequence space's
bounds, the states as module constants, and limits.
(Split out of ``connection.py`` so ``input``, ``output``, ``recovery``... share one copy.)"""

from __future__ import annotations

from rcunet.core.tcp.options import SECOND
from rcunet.core.tcp.state import State
from rcunet.wire import tcp

FIN, SYN, RST, PSH, ACK = tcp.FIN, tcp.SYN, tcp.RST, tcp.PSH, tcp.ACK
MASK32 = 0xFFFFFFFF
#: Half the sequence space (RFC 1982): no two sequence numbers the engine compares are
#: this far apart.  Sequence arithmetic itself is ``rcunet.wire.seqnum``'s, everywhere.
HALF32 = 0x80000000
# The states as module constants: ``State.X`` is two type-attribute lookups per use (the
# metaclass's, then the class's), which free-threaded 3.13 makes through the
# interpreter-wide type cache on every read; a global is one dict lookup.
CLOSED = State.CLOSED
LISTEN = State.LISTEN
SYN_SENT = State.SYN_SENT
SYN_RECEIVED = State.SYN_RECEIVED
ESTABLISHED = State.ESTABLISHED
FIN_WAIT_1 = State.FIN_WAIT_1
FIN_WAIT_2 = State.FIN_WAIT_2
CLOSE_WAIT = State.CLOSE_WAIT
CLOSING = State.CLOSING
LAST_ACK = State.LAST_ACK
TIME_WAIT = State.TIME_WAIT

MS = 1_000_000
#: RFC 7323 §5.5: TS.Recent is invalid after 24 days of idleness.
PAWS_IDLE_LIMIT = 24 * 86400 * SECOND
#: Linux TCP_PAWS_WINDOW: TSvals this many ticks older than TS.Recent still pass PAWS.
PAWS_WINDOW = 1
#: Bytes of option space a timestamp takes on every segment (RFC 7323 §3.2, aligned).
TS_OPTION_LEN = 12
#: ... and the MD5 signature option (RFC 2385: NOP NOP kind length, 16-byte digest).
MD5_OPTION_LEN = 20
#: Linux TCP_MSS_DEFAULT / TCP_MIN_MSS: bounds of the first receive-MSS estimate
#: (tcp_initialize_rcv_mss); the estimate then grows to the segments seen.
RCV_MSS_HINT = 536
RCV_MSS_MIN = 88
#: Synchronized states in which an ABORT sends RST (RFC 9293 §3.10.5).
#: States in which send() queues data (SYN-SENT/RECEIVED: sent once established).
SEND_STATES = (SYN_SENT, SYN_RECEIVED, ESTABLISHED, CLOSE_WAIT)
ABORT_SENDS_RST = (SYN_RECEIVED, ESTABLISHED, FIN_WAIT_1,
                    FIN_WAIT_2, CLOSE_WAIT)


_new_tuple = tuple.__new__


def segment_repr(src_port: int, dst_port: int, seq: int, ack: int, flags: int, window: int,
                 payload: bytes, sack_blocks: tuple[tuple[int, int], ...],
                 timestamp: tuple[int, int] | None, ecn: int = 0) -> tcp.Repr:
    """``tcp.Repr(src_port=..., ..., sack_blocks=..., timestamp=...)`` with every other
    field at its default, built as the tuple it is: the NamedTuple's keyword ``__new__``
    costs 1.9 us, this 0.57 us (timeit, 3.11), once per segment the engine sends.  It
    depends on wire/tcp.py's field order, which
    tests/core/test_tcp_segment_repr.py pins."""
    return _new_tuple(tcp.Repr, (src_port, dst_port, seq, ack, flags, window, payload, 0,
                                 None, None, False, sack_blocks, timestamp, (), 0, None,
                                 ecn))


def syn_repr(src_port: int, dst_port: int, seq: int, ack: int, flags: int, window: int,
             payload: bytes, mss: int, window_scale: int | None, sack_permitted: bool,
             timestamp: tuple[int, int] | None,
             unknown_options: tuple[tuple[int, bytes], ...]) -> tcp.Repr:
    """``segment_repr`` for a SYN or SYN-ACK: the handshake options instead of SACK
    blocks (tests/core/test_tcp_segment_repr.py pins it to the keyword constructor)."""
    return _new_tuple(tcp.Repr, (src_port, dst_port, seq, ack, flags, window, payload, 0,
                                 mss, window_scale, sack_permitted, (), timestamp,
                                 unknown_options, 0, None, 0))
