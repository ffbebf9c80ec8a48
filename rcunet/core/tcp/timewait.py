"""TIME-WAIT as a protocol object (Linux ``tcp_timewait_sock`` and
``tcp_timewait_state_process``): what remains of a connection once it closed, and the
rules for a segment that reaches it.  The one copy of those rules: the host's TIME_WAIT
entries (``rcunet.host.tcp.timewait``), ``Connection``'s TIME-WAIT helpers and
connect()'s port reuse (``rcunet.tables.portsel.twsk_unique``) all call this module.

Sans-IO like the rest of core: ``now`` comes in as an argument.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rcunet.wire import tcp
from rcunet.wire.seqnum import gt, lt

if TYPE_CHECKING:
    from rcunet.core.tcp.connection import Connection

MASK32 = 0xFFFFFFFF
MS = 1_000_000


def reuse_iss(snd_nxt: int) -> int:
    """The ISS of a connection that replaces a TIME-WAIT one whose SND.NXT was
    ``snd_nxt``: Linux ``tw_snd_nxt + 65535 + 2`` (tcp_timewait_state_process for a new
    SYN, tcp_twsk_unique for connect()), far enough ahead that the peer's PAWS and
    window checks reject the old incarnation's duplicates.  Never 0 (0 means "pick one")."""
    return ((snd_nxt + 65535 + 2) & MASK32) or 1


class TwAction(enum.Enum):
    """What a segment that reached a TIME-WAIT entry asks of the host."""

    #: A RST: the entry is killed (RFC 1337 off, Linux's default tcp_rfc1337=0).
    KILL = enum.auto()
    #: A newer SYN: kill the entry and let the listener open a new incarnation with
    #: ``reuse_iss`` (RFC 6191 §2 with timestamps, RFC 1122 §4.2.2.13 without).
    REOPEN = enum.auto()
    #: A FIN, an out-of-window or an old SYN: answer with the entry's ACK (``ack_for``).
    ACK = enum.auto()
    #: Anything else is dropped silently.
    DROP = enum.auto()


@dataclass(frozen=True, slots=True)
class TimeWait:
    """What a TIME-WAIT connection keeps (read under the socket lock when it entered the
    state); immutable, so any thread may read it without a lock."""

    snd_nxt: int
    rcv_nxt: int
    ts_ok: bool
    #: TS.Recent and when it was taken (0 without timestamps: never reused by connect()).
    ts_recent: int
    ts_recent_stamp: int
    ts_offset: int
    #: The window the entry advertises (rcvbuf >> rcv_wscale, at most 65535).
    window: int
    #: How long the state lasts (Options.time_wait_timeout, ns).
    timeout: int
    #: The IP ECN field its ACKs go with: the socket's TOS (tw_tos), ECT(0) for AccECN.
    ip_ecn: int = 0

    @classmethod
    def of(cls, conn: Connection) -> TimeWait:
        """The TIME-WAIT state of ``conn`` (called under its socket lock)."""
        t = conn.tcb
        return cls(snd_nxt=t.snd_nxt, rcv_nxt=t.rcv_nxt, ts_ok=bool(t.ts_ok),
                   ts_recent=t.ts_recent if t.ts_ok else 0,
                   ts_recent_stamp=(t.ts_recent_stamp or 1) if t.ts_ok else 0,
                   ts_offset=t.ts_offset,
                   window=min(0xFFFF, conn.options.rcvbuf >> t.rcv_wscale),
                   timeout=conn.options.time_wait_timeout,
                   ip_ecn=conn.ecn.tos_ecn())

    def accepts_syn(self, syn: tcp.Repr) -> bool:
        """May this SYN open a new incarnation?  Linux tcp_timewait_state_process: a
        bare SYN that PAWS does not reject and whose sequence number is beyond RCV.NXT
        or whose TSval is newer than TS.Recent."""
        flags = syn.flags
        if not flags & tcp.SYN or flags & (tcp.ACK | tcp.RST):
            return False
        tsval = syn.timestamp[0] if syn.timestamp is not None and self.ts_ok else None
        if tsval is not None and lt(tsval, self.ts_recent):
            return False  # PAWS
        return gt(syn.seq, self.rcv_nxt) or (tsval is not None and gt(tsval, self.ts_recent))

    def reuse_iss(self) -> int:
        return reuse_iss(self.snd_nxt)

    def action(self, seg: tcp.Repr) -> TwAction:
        """tcp_timewait_state_process, in brief (Linux's default tcp_rfc1337=0)."""
        flags = seg.flags
        if flags & tcp.RST:
            return TwAction.KILL
        if self.accepts_syn(seg):
            return TwAction.REOPEN
        if flags & tcp.FIN or seg.seq != self.rcv_nxt or flags & tcp.SYN:
            return TwAction.ACK
        return TwAction.DROP

    def ack_for(self, seg: tcp.Repr, now: int) -> tcp.Repr:
        """The ACK the entry answers ``seg`` with (tcp_timewait_send_ack)."""
        timestamp = None
        if self.ts_ok:
            timestamp = ((now // MS + self.ts_offset) & MASK32, self.ts_recent)
        return tcp.Repr(src_port=seg.dst_port, dst_port=seg.src_port, seq=self.snd_nxt,
                        ack=self.rcv_nxt, flags=tcp.ACK, window=self.window,
                        timestamp=timestamp, ecn=self.ip_ecn)
