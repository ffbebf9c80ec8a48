"""The transmission control block: RFC 9293 §3.3.1 variables under their RFC names.

Sequence numbers are plain ints modulo 2**32, compared only with ``rcunet.wire.seqnum``.
Window values (``snd_wnd``, ``rcv_wnd``) are in bytes, already scaled.
"""

from __future__ import annotations

from dataclasses import dataclass

from rcunet.wire.seqnum import add, sub

#: ns per millisecond: the timestamp clock's tick (common.MS; tcb.py sits below common)
_MS = 1_000_000


@dataclass(slots=True)
class Tcb:
    # --- send sequence space (RFC 9293 §3.3.1, Figure 3) --------------------------------
    iss: int = 0  #: initial send sequence number
    snd_una: int = 0  #: oldest unacknowledged sequence number
    snd_nxt: int = 0  #: next sequence number to send (reset to snd_una after an RTO)
    snd_max: int = 0  #: highest sequence number sent + 1 (BSD's snd_max)
    snd_wnd: int = 0  #: peer's receive window, scaled, in bytes
    snd_wl1: int = 0  #: segment sequence number of the last window update (no WL2: Linux)
    max_snd_wnd: int = 0  #: largest window the peer ever offered (RFC 5961 §5, SWS)
    snd_wscale: int = 0  #: shift applied to the peer's window field (RFC 7323 §2.3)
    snd_mss: int = 536  #: effective send MSS: payload bytes per segment (RFC 9293 §3.7.1)
    # --- receive sequence space (RFC 9293 §3.3.1, Figure 4) -----------------------------
    irs: int = 0  #: initial receive sequence number
    rcv_nxt: int = 0  #: next sequence number expected
    rcv_adv: int = 0  #: right edge of the window we advertised (RCV.NXT + RCV.WND at the time)
    #: the highest right edge we ever advertised (RFC 7323 §2.4; Linux rcv_mwnd_seq): past
    #: rcv_adv only once a window shrank (``advertise`` keeps it)
    rcv_mwnd_seq: int = 0
    rcv_wscale: int = 0  #: shift applied to the window field we send
    rcv_mss: int = 536  #: the peer's likely segment size, for delayed-ACK counting
    # --- RFC 7323 timestamps ----------------------------------------------------------------
    ts_ok: bool = False  #: both SYNs carried TSopt
    ts_offset: int = 0  #: added to our millisecond clock (per-connection, RFC 7323 §5.4)
    ts_recent: int = 0  #: TS.Recent
    ts_recent_stamp: int | None = None  #: ``now`` when TS.Recent was last set (RFC 7323 §5.5)
    last_ack_sent: int = 0  #: Last.ACK.sent
    # --- RFC 2018 -----------------------------------------------------------------------
    sack_ok: bool = False  #: both SYNs carried SACK-permitted
    # --- RFC 2385 -----------------------------------------------------------------------
    md5: bool = False  #: every segment carries the MD5 signature option (20 bytes)

    @property
    def rcv_wnd(self) -> int:
        """RCV.WND as the peer sees it: what is left of the last advertised window."""
        d = sub(self.rcv_adv, self.rcv_nxt)
        return d if d > 0 else 0

    @property
    def max_rcv_wnd(self) -> int:
        """How far past RCV.NXT any window we offered reached (Linux
        tcp_max_receive_window): a peer may have sent up to there before a window that
        shrank reached it, so its segments, ACKs included, are still acceptable."""
        d = sub(self.rcv_mwnd_seq, self.rcv_nxt)
        return d if d > 0 else 0

    def first_window(self, window: int) -> None:
        """The window our SYN or SYN,ACK offers from RCV.NXT (tcp_connect_init,
        tcp_create_openreq_child): both edges start there."""
        self.rcv_adv = self.rcv_mwnd_seq = add(self.rcv_nxt, window)

    def advertise(self, window: int) -> None:
        """A window of ``window`` bytes offered from RCV.NXT (tcp_select_window); the
        highest edge follows it up, never down (tcp_update_max_rcv_wnd_seq)."""
        self.rcv_adv = add(self.rcv_nxt, window)
        if sub(self.rcv_adv, self.rcv_mwnd_seq) > 0:
            self.rcv_mwnd_seq = self.rcv_adv

    def ts_val(self, now: int) -> int:
        """Our TSval: a millisecond clock plus the per-connection offset (RFC 7323 §5.4)."""
        return (now // _MS + self.ts_offset) & 0xFFFFFFFF

    @property
    def offered_window(self) -> int:
        """The window our last ACK offered, from its RCV.NXT (Linux tp->rcv_wnd)."""
        return max(0, sub(self.rcv_adv, self.last_ack_sent))
