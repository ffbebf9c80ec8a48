"""Linux's delayed-ACK engine: quick-ack mode, the adaptive ACK timeout (ato) and
pingpong mode (net/ipv4/tcp_input.c tcp_event_data_recv, tcp_incr_quickack,
tcp_enter_quickack_mode, tcp_in_quickack_mode; include/net/tcp.h tcp_dec_quickack_mode;
net/ipv4/tcp_output.c tcp_send_delayed_ack).

A connection starts in quick-ack mode: the first data it receives sets ``quick`` to
rcv_wnd / (2 * rcv_mss) ACKs (2 at least, TCP_MAX_QUICKACKS at most), each sent at once;
afterwards ACKs are delayed by ``ato``, which follows the peer's inter-arrival time.
Pure: times are ns, given by the caller.
"""

from __future__ import annotations

from rcunet.core.tcp.options import MS

TCP_ATO_MIN = 40 * MS  #: HZ/25
TCP_DELACK_MIN = 40 * MS
TCP_DELACK_MAX = 200 * MS  #: HZ/5
TCP_MAX_QUICKACKS = 16
#: tcp_send_delayed_ack's ceiling outside pingpong mode (HZ/2)
_MAX_ATO = 500 * MS


class DelayedAck:
    __slots__ = ("quick", "ato", "lrcvtime", "pingpong")

    def __init__(self) -> None:
        self.quick = 0  #: ACKs left to send at once (icsk_ack.quick)
        self.ato = 0  #: 0 until the first data segment (icsk_ack.ato)
        self.lrcvtime = 0  #: when data last arrived
        #: interactive-session mode (icsk_ack.pingpong); set by a FIN in ESTABLISHED
        #: (tcp_fin).  Linux also counts data sent within ato of an arrival
        #: (tcp_event_data_sent); rcunet does not yet.
        self.pingpong = 0

    def incr_quickack(self, rcv_wnd: int, rcv_mss: int, max_quickacks: int) -> None:
        """tcp_incr_quickack."""
        quickacks = rcv_wnd // (2 * max(1, rcv_mss))
        if quickacks == 0:
            quickacks = 2
        quickacks = min(quickacks, max_quickacks)
        if quickacks > self.quick:
            self.quick = quickacks

    def enter_quickack_mode(self, rcv_wnd: int, rcv_mss: int) -> None:
        """tcp_enter_quickack_mode: out-of-order or duplicate data, a window opening."""
        self.incr_quickack(rcv_wnd, rcv_mss, TCP_MAX_QUICKACKS)
        self.pingpong = 0
        self.ato = TCP_ATO_MIN

    def data_received(self, now: int, rcv_wnd: int, rcv_mss: int, rto: int) -> None:
        """tcp_event_data_recv: in-sequence data arrived."""
        if not self.ato:
            # The first data segment: initialise the delayed-ACK engine.
            self.incr_quickack(rcv_wnd, rcv_mss, TCP_MAX_QUICKACKS)
            self.ato = TCP_ATO_MIN
        else:
            m = now - self.lrcvtime
            if m <= TCP_ATO_MIN // 2:
                self.ato = (self.ato >> 1) + TCP_ATO_MIN // 2
            elif m < self.ato:
                self.ato = min((self.ato >> 1) + m, rto)
            elif m > rto:
                # Too long a gap: the sender failed to restart its window; ACK quickly.
                self.incr_quickack(rcv_wnd, rcv_mss, TCP_MAX_QUICKACKS)
        self.lrcvtime = now

    def in_quickack_mode(self) -> bool:
        """tcp_in_quickack_mode."""
        return bool(self.quick) and not self.pingpong

    def ack_sent(self, acked_data: bool) -> None:
        """tcp_dec_quickack_mode (from tcp_event_ack_sent): one quick ACK used when the
        ACK acknowledged data that had scheduled one."""
        if self.quick:
            pkts = 1 if acked_data else 0
            if pkts >= self.quick:
                self.quick = 0
                self.ato = TCP_ATO_MIN  # leaving quick-ack mode: restore the ato
            else:
                self.quick -= pkts

    def timeout(self, srtt: int | None) -> int:
        """tcp_send_delayed_ack: how long this ACK may wait."""
        ato = self.ato or TCP_DELACK_MIN
        if ato > TCP_DELACK_MIN:
            max_ato = TCP_DELACK_MAX if self.pingpong else _MAX_ATO
            if srtt:
                rtt = max(srtt, TCP_DELACK_MIN)
                if rtt < max_ato:
                    max_ato = rtt
            ato = min(ato, max_ato)
        return ato
