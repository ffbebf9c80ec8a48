"""The application's write path (Linux tcp_sendmsg_locked): how much of a write the send
buffer takes, where its PSH marks fall, and whether Nagle holds its tail."""

from __future__ import annotations

import errno as errnos

from rcunet.core.tcp.chrono import BUSY, SNDBUF_LIMITED
from rcunet.core.tcp.common import HALF32, MASK32, SEND_STATES
from rcunet.wire.seqnum import sub

#: The payload one GSO skb may carry (Linux GSO_LEGACY_MAX_SIZE 65536 - 1 - MAX_TCP_HEADER)
GSO_MAX_SIZE = 65536 - 1 - 320


class WriteMixin:
    """``Connection``'s write path."""

    __slots__ = ()

    def send(self, data: bytes | bytearray | memoryview, now: int,
             skb_ends: tuple[int, ...] = (), more: bool = False, eor: bool = False) -> int:
        """Queue ``data``; return how many bytes the send buffer took (0 when full).
        ``skb_ends``: offsets into ``data`` where an skb ends (no segment crosses one;
        0 ends the skb the bytes before ``data`` are in); those past what was taken are
        dropped.  ``more`` is MSG_MORE: this write's partial tail waits for more
        (tcp_push with TCP_NAGLE_CORK) and gets no PSH; ``eor`` is MSG_EOR: the write
        ends a record, which no later write's bytes join in a segment (Linux
        tcp_skb_can_collapse_to).  Both apply only when every byte was taken (Linux sets
        them on the last skb)."""
        self._now = now
        self.quiet = False
        self._raise_pending_error()
        if self._fin_queued or self.state not in SEND_STATES:
            raise BrokenPipeError(errnos.EPIPE, "send after shutdown or close")
        n = min(len(data), self._send_room())
        if n:
            self.chrono.start(BUSY, now)  # tcp_skb_entail
        if n < len(data):
            self._send_blocked = True
            self.chrono.start(SNDBUF_LIMITED, now)  # the writer waits for space
            more = eor = False  # the writer will wait: tcp_push(flags & ~MSG_MORE)
        if n:
            if skb_ends:
                start = (self._tx_seq + len(self._tx)) & MASK32
                self._skb_ends.extend((start + off) & MASK32 for off in skb_ends if off <= n)
            self._tx.append(memoryview(data)[:n] if n < len(data) else data)
            self._mark_push(n, more, eor)
            if self._nagle_holds_tail():
                self.quiet = True
            else:
                self._more = more
                try:
                    self._output(now)
                finally:
                    self._more = False
        return n

    def _send_room(self) -> int:
        """Bytes a write may queue now: the send buffer's room, and with a not-sent
        low-water mark only while fewer bytes than it are unsent.  tcp_sendmsg_locked
        checks sk_stream_memory_free before each new skb of size_goal bytes and sends
        each full one at once (tcp_push_one), so a write takes what cwnd and the window
        let out now, then whole skbs until the unsent bytes reach the mark."""
        room = self.send_space
        lowat = self.options.notsent_lowat
        if lowat < 0xFFFFFFFF:
            notsent = self.notsent
            if notsent >= lowat:
                return 0
            goal = self._size_goal()
            now_out = max(0, self._sendable_now() - notsent)
            below = lowat - notsent
            room = min(room, now_out + (below + goal - 1) // goal * goal)
        return room

    def _sendable_now(self) -> int:
        """Bytes cwnd and the peer's window let out now, beyond SND.MAX."""
        t = self.tcb
        flight = sub(t.snd_max, t.snd_una)
        return max(0, min(self.cc.cwnd - flight, t.snd_wnd - flight))

    def _size_goal(self) -> int:
        """tcp_xmit_size_goal: the bytes one skb takes, whole segments up to the GSO
        limit and half the largest window the peer offered (tcp_bound_to_half_wnd)."""
        t = self.tcb
        mss = t.snd_mss
        cutoff = t.max_snd_wnd >> 1 if t.max_snd_wnd > 536 else t.max_snd_wnd
        goal = min(GSO_MAX_SIZE, cutoff)
        return max(mss, goal // mss * mss)

    def _mark_push(self, n: int, more: bool, eor: bool) -> None:
        """tcp_sendmsg_locked's push marks for a write of ``n`` bytes: each skb of
        size_goal bytes it fills that ends more than half the peer's largest window past
        the last mark is marked (forced_push -> tcp_mark_push; rcunet has no skbs: they
        are counted from where what cwnd lets out at once ends, as Linux sends the head
        skb when it is full and tso_fragment leaves the rest to take more bytes), the
        parts of such a write that cwnd or the window let out end with PSH
        (``_push_burst_end``), and the write's tail is pushed (tcp_push ->
        tcp_mark_push) unless MSG_MORE.  A MSG_EOR write's end is a record boundary that
        keeps its PSH."""
        end = (self._tx_seq + len(self._tx)) & MASK32
        half = self.tcb.max_snd_wnd >> 1
        if n > half:
            goal = self._size_goal()
            unsent = self.notsent
            first = (end - unsent + min(unsent, self._sendable_now())) & MASK32
            left = ((end - first + HALF32) & MASK32) - HALF32
            boundary = (first + goal) & MASK32
            for _ in range(max(0, (left - 1) // goal)):  # full skbs before the tail one
                if ((boundary - self._pushed_seq) & MASK32) > half:
                    self._psh_marks.append(boundary)
                    self._pushed_seq = boundary
                boundary = (boundary + goal) & MASK32
        forced = ((end - self._pushed_seq) & MASK32) > half
        if forced:
            self._forced_until = end
        if forced or not more:
            self._pushed_seq = end
            self._psh_seq = end
        else:
            self._psh_seq = None  # appending to the tail clears its mark ("if (!copied)")
        if eor:
            self._eor_marks.append(end)

    def _nagle_holds_tail(self) -> bool:
        """Would ``_output`` send nothing after an append?  True when nothing but new data
        is pending (no recovery, no ACK owed, no retransmission), the unsent bytes are
        less than a segment and Nagle holds them (``_nagle_applies``, the rule
        ``_try_send`` applies): the common case of a writer's small chunks joining the
        segment after the one in flight, where running the whole output path is waste."""
        t = self.tcb
        return (self.loss.algorithm is None and not self._ack_now
                and t.snd_nxt == t.snd_max  # unsent bytes: sub(add(tx_seq, len), snd_nxt)
                and ((self._tx_seq + len(self._tx) - t.snd_nxt + HALF32) & MASK32) - HALF32
                < t.snd_mss
                and not self._eor_marks
                and self._nagle_applies())
