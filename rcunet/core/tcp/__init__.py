"""TCP as a sans-IO engine (RFC 9293).  Start with ``connection.py``.

Modules: ``state`` (states and allowed transitions), ``tcb`` (RFC variables), ``connection``
(the engine: the RFC 9293 state machine, coordinating its parts), the parts it holds --
``receiver`` (receive queue, window, text and FIN), ``delack`` (ACK timing), ``autotune``
(buffer growth), ``sender`` (send queue, Nagle, PSH, what goes out), ``recovery`` (loss
detection, SACK/NewReno recovery), ``timers`` (deadlines, back-off, expiry),
``challenge`` (RFC 5961 limits) -- ``listen`` (LISTEN decisions, stateless RSTs),
``rto`` (RFC 6298),
``reassembly`` (out-of-order queue), ``sack`` (RFC 2018 blocks, RFC 6675 scoreboard),
``congestion`` (reno, cubic), ``isn`` (RFC 6528), ``syncookies`` (Linux's encoding),
``events``, ``counters`` (nstat names), ``options`` (per-connection settings).
"""

from rcunet.core.tcp.connection import Connection
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.events import (
    Closed,
    ConnectionFailed,
    DataReceived,
    Established,
    FinReceived,
    ResetReceived,
    SendSpaceAvailable,
    TimeWaitEntered,
)
from rcunet.core.tcp.listen import ListenAction, listen_action, reset_for
from rcunet.core.tcp.options import Options
from rcunet.core.tcp.state import State

__all__ = [
    "Closed", "Connection", "ConnectionFailed", "Counters", "DataReceived", "Established",
    "FinReceived", "ListenAction", "Options", "ResetReceived", "SendSpaceAvailable", "State",
    "TimeWaitEntered", "listen_action", "reset_for",
]
