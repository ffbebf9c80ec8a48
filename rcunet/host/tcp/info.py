"""``TCP_INFO``: a snapshot of a TCP socket in Linux's ``struct tcp_info`` terms
(include/uapi/linux/tcp.h; filled as ``tcp_get_info`` in net/ipv4/tcp.c fills it).

``snapshot`` returns the fields rcunet tracks, by their ``tcpi_`` names; ``pack`` lays
them out as the kernel's struct (fields rcunet does not track are zero there, as a kernel
older than the field would leave them).  Times are microseconds (rto, ato, rtt, rttvar)
or milliseconds since the event (last_data_sent, last_data_recv, last_ack_recv), as in
Linux.  The caller holds the socket lock or reads a socket no other thread drives.
"""

from __future__ import annotations

import struct
from typing import TYPE_CHECKING

from rcunet.core.tcp import State as CState
from rcunet.core.tcp.accecn import EcnMode
from rcunet.core.tcp.ecnstate import EcnState
from rcunet.core.tcp.pacing import pacing_rate, ssthresh_segments
from rcunet.core.tcp.prr import CaState
from rcunet.core.tcp.recovery import REORDERING
from rcunet.wire import ecn as ipecn

if TYPE_CHECKING:
    from rcunet.host.tcp.sock import TcpSock

#: Linux's TCP_* state numbers (include/net/tcp_states.h).
LINUX_STATE = {
    CState.ESTABLISHED: 1, CState.SYN_SENT: 2, CState.SYN_RECEIVED: 3,
    CState.FIN_WAIT_1: 4, CState.FIN_WAIT_2: 5, CState.TIME_WAIT: 6, CState.CLOSED: 7,
    CState.CLOSE_WAIT: 8, CState.LAST_ACK: 9, CState.LISTEN: 10, CState.CLOSING: 11,
}
TCPI_OPT_TIMESTAMPS, TCPI_OPT_SACK, TCPI_OPT_WSCALE = 1, 2, 4
TCPI_OPT_ECN = 8  #: ECN feedback negotiated, RFC 3168 or AccECN (tcp_ecn_mode_any)
TCPI_OPT_ECN_SEEN = 16  #: the peer's packets have been ECT or CE (TCP_ECN_SEEN)
TCPI_OPT_SYN_DATA = 32  #: the SYN's data was acknowledged (Fast Open: tp->syn_data_acked)
TCPI_OPT_TFO_CHILD = 128  #: a passive Fast Open child (tp->syn_fastopen_child)
#: tcp_delack_max: tcpi_ato is capped by it (TCP_DELACK_MAX, 200 ms).
DELACK_MAX = 200_000_000
#: sk_max_pacing_rate unset (SO_MAX_PACING_RATE): ~0, shown as ~0ULL.
NO_PACING_LIMIT = (1 << 64) - 1
#: A listener's cwnd, never used (tcp_init_sock's TCP_INIT_CWND).
TCP_INIT_CWND = 10
#: tcp_min_rtt before any RTT sample (minmax_reset's ~0U).
NO_RTT_SAMPLE = 0xFFFFFFFF
#: tcpi_ecn_mode (Linux 7.0's TCPI_ECN_MODE_*) per negotiated mode.
ECN_MODE = {EcnMode.DISABLED: 0, EcnMode.RFC3168: 1, EcnMode.ACCECN: 2, EcnMode.PENDING: 3}

#: struct tcp_info up to tcpi_rcv_wnd (Linux 6.x): name, struct code, in layout order.
LAYOUT: tuple[tuple[str, str], ...] = (
    ("state", "B"), ("ca_state", "B"), ("retransmits", "B"), ("probes", "B"),
    ("backoff", "B"), ("options", "B"), ("wscale", "B"), ("flags", "B"),
    ("rto", "I"), ("ato", "I"), ("snd_mss", "I"), ("rcv_mss", "I"), ("unacked", "I"),
    ("sacked", "I"), ("lost", "I"), ("retrans", "I"), ("fackets", "I"),
    ("last_data_sent", "I"), ("last_ack_sent", "I"), ("last_data_recv", "I"),
    ("last_ack_recv", "I"), ("pmtu", "I"), ("rcv_ssthresh", "I"), ("rtt", "I"),
    ("rttvar", "I"), ("snd_ssthresh", "I"), ("snd_cwnd", "I"), ("advmss", "I"),
    ("reordering", "I"), ("rcv_rtt", "I"), ("rcv_space", "I"), ("total_retrans", "I"),
    ("pacing_rate", "Q"), ("max_pacing_rate", "Q"), ("bytes_acked", "Q"),
    ("bytes_received", "Q"), ("segs_out", "I"), ("segs_in", "I"), ("notsent_bytes", "I"),
    ("min_rtt", "I"), ("data_segs_in", "I"), ("data_segs_out", "I"),
    ("delivery_rate", "Q"), ("busy_time", "Q"), ("rwnd_limited", "Q"),
    ("sndbuf_limited", "Q"), ("delivered", "I"), ("delivered_ce", "I"),
    ("bytes_sent", "Q"), ("bytes_retrans", "Q"), ("dsack_dups", "I"),
    ("reord_seen", "I"), ("rcv_ooopack", "I"), ("snd_wnd", "I"), ("rcv_wnd", "I"),
    ("rehash", "I"), ("total_rto", "H"), ("total_rto_recoveries", "H"),
    ("total_rto_time", "I"), ("received_ce", "I"), ("delivered_e1_bytes", "I"),
    ("delivered_e0_bytes", "I"), ("delivered_ce_bytes", "I"), ("received_e1_bytes", "I"),
    ("received_e0_bytes", "I"), ("received_ce_bytes", "I"),
    # Linux 7.0: tcpi_ecn_mode:2, tcpi_accecn_opt_seen:2, tcpi_accecn_fail_mode:4,
    # tcpi_options2:24 in one word (``pack`` assembles it)
    ("ecn_bits", "I"),
)
_STRUCT = struct.Struct("=" + "".join(code for _name, code in LAYOUT))
SIZE = _STRUCT.size


def _us(ns: int) -> int:
    return max(0, ns // 1000)


def _ms_since(now: int, at: int | None) -> int:
    return 0 if not at else max(0, (now - at) // 1_000_000)


def snapshot(sk: TcpSock, now: int) -> dict[str, int]:
    """The ``tcpi_*`` values rcunet tracks for ``sk`` at ``now`` (ns)."""
    conn = sk.conn
    if conn is None:
        from rcunet.tables.entry import State

        if sk.state == State.LISTEN:
            return _listener_fields(sk)
        return {"tcpi_state": 7}
    t = conn.tcb
    rto = conn.rto
    mss = max(1, t.snd_mss)
    in_flight = (t.snd_max - t.snd_una) & 0xFFFFFFFF
    options = 0
    if t.ts_ok:
        options |= TCPI_OPT_TIMESTAMPS
    if t.sack_ok:
        options |= TCPI_OPT_SACK
    if t.rcv_wscale or t.snd_wscale or conn._peer_ws_offered:
        options |= TCPI_OPT_WSCALE
    if conn.syn_data_acked:
        options |= TCPI_OPT_SYN_DATA
    if conn.fastopen_child:
        options |= TCPI_OPT_TFO_CHILD
    ecn = conn.ecn
    if ecn.negotiated:
        options |= TCPI_OPT_ECN
    if ecn.seen:
        options |= TCPI_OPT_ECN_SEEN
    loss = conn.loss
    sacked = -(-loss.scoreboard.sacked_bytes // mss)  # tp->sacked_out, in segments
    lost, retrans = loss.log.lost_and_retrans_out()
    ca_state = _ca_state(loss.ca_state(), sacked + lost + retrans)
    packets_out = len(loss.log) + sacked  # tp->packets_out: the SACKed ones too
    cwnd = conn.cc.cwnd // mss
    ssthresh = ssthresh_segments(conn.cc.ssthresh, mss)
    stats = conn.stats
    srtt = rto.srtt or 0
    info = {
        "state": LINUX_STATE.get(conn.state, 7),
        "ca_state": ca_state,
        "retransmits": conn._retransmits,
        "probes": conn._probes_out,
        "backoff": rto.backoff,
        "options": options,
        "snd_wscale": t.snd_wscale,
        "rcv_wscale": t.rcv_wscale,
        "rto": _us(rto.rto),
        "snd_mss": t.snd_mss,
        "rcv_mss": t.rcv_mss,
        "ato": _us(min(conn.delack.ato, DELACK_MAX)),
        "unacked": packets_out,
        "sacked": sacked,
        "lost": lost,
        "retrans": retrans,
        "fackets": 0,  # not filled since Linux 4.18 removed FACK
        "last_data_sent": _ms_since(now, stats.last_data_sent_at),
        "last_ack_sent": 0,  # "Not remembered, sorry." (Linux leaves it 0)
        "last_data_recv": _ms_since(now, conn._last_rcv_at),
        "last_ack_recv": _ms_since(now, conn.timers.last_rcv_at),
        "rtt": _us(srtt),
        "rttvar": _us(rto.rttvar),
        "snd_ssthresh": ssthresh,
        "snd_cwnd": cwnd,
        "advmss": conn.options.mss,
        "reordering": loss.reordering,
        "rcv_rtt": _us(conn.autotune.rcv_rtt),
        "rcv_space": conn._rcv_space,
        "rcv_ssthresh": conn.receiver.rcv_ssthresh,
        "total_retrans": loss.total_retrans,
        "pacing_rate": pacing_rate(mss, cwnd, ssthresh, packets_out, _us(srtt)),
        "max_pacing_rate": NO_PACING_LIMIT,
        "bytes_acked": stats.bytes_acked,
        "bytes_received": conn.receiver.bytes_received,
        "segs_out": stats.segs_out,
        "segs_in": stats.segs_in,
        "notsent_bytes": max(0, conn.unacked - in_flight),
        "min_rtt": loss.min_rtt_us or NO_RTT_SAMPLE,
        "data_segs_in": stats.data_segs_in,
        "data_segs_out": stats.data_segs_out,
        "delivered": loss.delivered,
        "bytes_sent": stats.bytes_sent,
        "bytes_retrans": loss.bytes_retrans,
        "dsack_dups": loss.dsack_dups,
        "reord_seen": loss.reord_seen,
        "rcv_ooopack": conn.receiver.rcv_ooopack,
        "snd_wnd": t.snd_wnd,
        "rcv_wnd": t.offered_window,  # tp->rcv_wnd: what our last ACK offered
        "rehash": loss.timeout_rehash,  # rcunet has no PLB: only RTO rehashes
        "total_rto": loss.total_rto,
        "total_rto_recoveries": loss.total_rto_recoveries,
        "total_rto_time": loss.rto_time(now),
        **_ecn_fields(ecn),
    }
    busy, rwnd_limited, sndbuf_limited = conn.chrono.totals(now)
    info["busy_time"] = _us(busy)  # tcp_get_info_chrono_stats
    info["rwnd_limited"] = _us(rwnd_limited)
    info["sndbuf_limited"] = _us(sndbuf_limited)
    return {"tcpi_" + name: int(value) for name, value in info.items()}


def _ca_state(state: CaState, left_out: int) -> int:
    """icsk_ca_state as Linux leaves it after an ACK: Open becomes Disorder while
    segments are SACKed, marked lost or retransmitted and not yet acknowledged
    (tcp_try_to_open: tcp_left_out, tcp_any_retrans_done); rcunet's engine needs no
    Disorder of its own, so TCP_INFO tells it apart here."""
    if state is CaState.OPEN and left_out:
        return int(CaState.DISORDER)
    return int(state)


def _listener_fields(sk: TcpSock) -> dict[str, int]:
    """tcp_get_info for a listener: the fields valid in every state (pacing rates, which
    nothing set, tcp_reordering, the initial cwnd), and two aliased ones: tcpi_unacked is
    the accept queue's length (sk_ack_backlog), tcpi_sacked its limit
    (sk_max_ack_backlog)."""
    return {"tcpi_state": 10, "tcpi_pacing_rate": NO_PACING_LIMIT,
            "tcpi_max_pacing_rate": NO_PACING_LIMIT, "tcpi_reordering": REORDERING,
            "tcpi_snd_cwnd": TCP_INIT_CWND,
            "tcpi_unacked": len(sk.acceptq), "tcpi_sacked": sk.max_ack_backlog}


def _ecn_fields(ecn: EcnState) -> dict[str, int]:
    """tcp_get_info's ECN counters: CE marks the peer says it got (delivered_ce), CE
    marks we got (received_ce), AccECN's byte counters, the negotiated mode, what the
    peer's AccECN option showed and which feedback failed."""
    received = ecn.accecn_rx.received_bytes
    delivered = ecn.accecn_tx.delivered_bytes
    fail = (1 if ecn.ace_fail_send else 0) | (2 if ecn.ace_fail_recv else 0) \
        | (8 if ecn.accecn_tx.opt_fail_recv else 0)
    return {
        "delivered_ce": ecn.delivered_ce,
        "received_ce": ecn.accecn_rx.received_ce,
        "delivered_e1_bytes": delivered[ipecn.ECT_1],
        "delivered_e0_bytes": delivered[ipecn.ECT_0],
        "delivered_ce_bytes": delivered[ipecn.CE],
        "received_e1_bytes": received[ipecn.ECT_1],
        "received_e0_bytes": received[ipecn.ECT_0],
        "received_ce_bytes": received[ipecn.CE],
        "ecn_mode": ECN_MODE[ecn.mode],
        "accecn_opt_seen": int(ecn.accecn_tx.saw_opt),
        "accecn_fail_mode": fail,
    }


def pack(values: dict[str, int], buflen: int | None = None) -> bytes:
    """``values`` (a ``snapshot``) as Linux's struct tcp_info, cut to ``buflen``."""
    fields = dict(values)
    fields["tcpi_wscale"] = (fields.get("tcpi_snd_wscale", 0) & 0xF) | (
        (fields.get("tcpi_rcv_wscale", 0) & 0xF) << 4)
    fields["tcpi_ecn_bits"] = (fields.get("tcpi_ecn_mode", 0) & 0x3) | (
        (fields.get("tcpi_accecn_opt_seen", 0) & 0x3) << 2) | (
        (fields.get("tcpi_accecn_fail_mode", 0) & 0xF) << 4)
    raw = _STRUCT.pack(*(fields.get("tcpi_" + name, 0) & ((1 << (8 * struct.calcsize(code))) - 1)
                         for name, code in LAYOUT))
    return raw if buflen is None else raw[:max(0, buflen)]
