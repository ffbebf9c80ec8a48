"""The transmission control block: RFC 9293 §3.3.1 variables under their RFC names.

Sequence numbers are plain ints modulo 2**32, compared only with ``rcunet.wire.seqnum``.
Window values (``snd_wnd``, ``rcv_wnd``) are in bytes, already scaled.
"""

from __future__ import annotations

from dataclasses import dataclass

from rcunet.wire.seqnum import add, sub

#: ns per millisecond: the timestamp clock's tick (common.MS; tcb.py sits below common)
_MS = 1_000_000


# Its own __init__ (init=False): the one dataclass generates runs interpreted under mypyc.
@dataclass(slots=True, init=False)
class Tcb:
    # --- send sequence space (RFC 9293 §3.3.1, Figure 3) --------------------------------
    iss: int  #: initial send sequence number
    snd_una: int  #: oldest unacknowledged sequence number
    snd_nxt: int  #: next sequence number to send (reset to snd_una after an RTO)
    snd_max: int  #: highest sequence number sent + 1 (BSD's snd_max)
    snd_wnd: int  #: peer's receive window, scaled, in bytes
    snd_wl1: int  #: segment sequence number of the last window update (no WL2: Linux)
    max_snd_wnd: int  #: largest window the peer ever offered (RFC 5961 §5, SWS)
    snd_wscale: int  #: shift applied to the peer's window field (RFC 7323 §2.3)
    snd_mss: int  #: effective send MSS: payload bytes per segment (RFC 9293 §3.7.1)
    # --- receive sequence space (RFC 9293 §3.3.1, Figure 4) -----------------------------
    irs: int  #: initial receive sequence number
    rcv_nxt: int  #: next sequence number expected
    rcv_adv: int  #: right edge of the window we advertised (RCV.NXT + RCV.WND at the time)
    #: the highest right edge we ever advertised (RFC 7323 §2.4; Linux rcv_mwnd_seq): past
    #: rcv_adv only once a window shrank (``advertise`` keeps it)
    rcv_mwnd_seq: int
    rcv_wscale: int  #: shift applied to the window field we send
    rcv_mss: int  #: the peer's likely segment size, for delayed-ACK counting
    # --- RFC 7323 timestamps ----------------------------------------------------------------
    ts_ok: bool  #: both SYNs carried TSopt
    ts_offset: int  #: added to our millisecond clock (per-connection, RFC 7323 §5.4)
    ts_recent: int  #: TS.Recent
    ts_recent_stamp: int | None  #: ``now`` when TS.Recent was last set (RFC 7323 §5.5)
    last_ack_sent: int  #: Last.ACK.sent
    # --- RFC 2018 -----------------------------------------------------------------------
    sack_ok: bool  #: both SYNs carried SACK-permitted
    # --- RFC 2385 -----------------------------------------------------------------------
    md5: bool  #: every segment carries the MD5 signature option (20 bytes)

    def __init__(self, iss: int = 0, snd_una: int = 0, snd_nxt: int = 0, snd_max: int = 0,
                 snd_wnd: int = 0, snd_wl1: int = 0, max_snd_wnd: int = 0,
                 snd_wscale: int = 0, snd_mss: int = 536, irs: int = 0, rcv_nxt: int = 0,
                 rcv_adv: int = 0, rcv_mwnd_seq: int = 0, rcv_wscale: int = 0,
                 rcv_mss: int = 536, ts_ok: bool = False, ts_offset: int = 0,
                 ts_recent: int = 0, ts_recent_stamp: int | None = None,
                 last_ack_sent: int = 0, sack_ok: bool = False, md5: bool = False) -> None:
        self.iss = iss
        self.snd_una = snd_una
        self.snd_nxt = snd_nxt
        self.snd_max = snd_max
        self.snd_wnd = snd_wnd
        self.snd_wl1 = snd_wl1
        self.max_snd_wnd = max_snd_wnd
        self.snd_wscale = snd_wscale
        self.snd_mss = snd_mss
        self.irs = irs
        self.rcv_nxt = rcv_nxt
        self.rcv_adv = rcv_adv
        self.rcv_mwnd_seq = rcv_mwnd_seq
        self.rcv_wscale = rcv_wscale
        self.rcv_mss = rcv_mss
        self.ts_ok = ts_ok
        self.ts_offset = ts_offset
        self.ts_recent = ts_recent
        self.ts_recent_stamp = ts_recent_stamp
        self.last_ack_sent = last_ack_sent
        self.sack_ok = sack_ok
        self.md5 = md5

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
