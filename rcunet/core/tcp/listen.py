"""What a listening socket does with a segment, and the stateless replies (RFC 9293 §3.10.7).

The listener itself (SYN queue, accept queue, backlog limits) lives in the host; these
are the protocol decisions it needs: ``listen_action`` classifies a segment that reached
a LISTEN socket (§3.10.7.2), ``reset_for`` builds the RST for a segment that matches no
connection (§3.10.7.1).  A SYN it accepts becomes ``Connection.accept_syn`` (or a SYN
cookie, ``syncookies.syn_ack_for``).
"""

from __future__ import annotations

import enum

from rcunet.wire import tcp
from rcunet.wire.seqnum import add

FIN, SYN, RST, ACK = tcp.FIN, tcp.SYN, tcp.RST, tcp.ACK
#: RFC 7323 §2.3: shift counts above 14 are treated as 14.
MAX_WSCALE = 14


def seg_len(seg: tcp.Repr) -> int:
    """SEG.LEN: payload bytes plus one for each of SYN and FIN (RFC 9293 §3.3.1)."""
    return len(seg.payload) + (1 if seg.flags & SYN else 0) + (1 if seg.flags & FIN else 0)


def reset_for(seg: tcp.Repr) -> tcp.Repr | None:
    """The RST answering a segment that matches no connection (RFC 9293 §3.10.7.1).

    Never answer a RST with a RST.  ACK set: <SEQ=SEG.ACK><CTL=RST>; otherwise
    <SEQ=0><ACK=SEG.SEQ+SEG.LEN><CTL=RST,ACK>.
    """
    if seg.flags & RST:
        return None
    if seg.flags & ACK:
        return tcp.Repr(src_port=seg.dst_port, dst_port=seg.src_port, seq=seg.ack, ack=0,
                        flags=RST, window=0)
    return tcp.Repr(src_port=seg.dst_port, dst_port=seg.src_port, seq=0,
                    ack=add(seg.seq, seg_len(seg)), flags=RST | ACK, window=0)


class ListenAction(enum.Enum):
    DROP = "drop"  #: ignore silently
    RESET = "reset"  #: answer with ``reset_for(seg)`` (or try it as a SYN-cookie ACK first)
    SYN = "syn"  #: a connection request: ``Connection.accept_syn`` (or a SYN cookie)


def listen_action(seg: tcp.Repr) -> ListenAction:
    """What a LISTEN socket does with ``seg`` (RFC 9293 §3.10.7.2)."""
    if seg.flags & RST:
        return ListenAction.DROP  # "An incoming RST segment could not be valid"
    if seg.flags & ACK:
        return ListenAction.RESET  # "Any acknowledgment is bad if it arrives here"
    if seg.flags & SYN:
        if seg.flags & FIN:
            return ListenAction.DROP  # Linux drops SYN+FIN (tcp_rcv_state_process, 2012)
        return ListenAction.SYN
    return ListenAction.DROP  # "Any other control or text-bearing segment ... drop it"


def choose_wscale(rcvbuf: int) -> int:
    """Smallest shift that lets the 16-bit window field cover ``rcvbuf`` (RFC 7323 §2.2)."""
    shift = 0
    while (rcvbuf >> shift) > 0xFFFF and shift < MAX_WSCALE:
        shift += 1
    return shift
