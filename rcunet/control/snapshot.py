"""What the control socket reports, read from a live Host as plain data (JSON-ready).

Sockets (``ss``): every TCP entry of the connection table (established, SYN-RECV,
TIME-WAIT ...), every listener, every UDP socket, with ss's Recv-Q/Send-Q meaning (for a
listener: accept queue length and backlog), and for TCP connections the tcp_info fields
``ss -i`` prints.  Counters (``nstat``): the Host's SNMP counters, absolute.
"""

from __future__ import annotations

import socket
from typing import Any

from rcunet.host.tcp.info import snapshot as tcp_info_snapshot
from rcunet.tables.entry import State
from rcunet.wire.addr import unmapped

NS_PER_MS = 1_000_000
STATE_NAMES = {State.ESTABLISHED: "ESTAB", State.SYN_SENT: "SYN-SENT",
               State.SYN_RECV: "SYN-RECV", State.FIN_WAIT1: "FIN-WAIT-1",
               State.FIN_WAIT2: "FIN-WAIT-2", State.TIME_WAIT: "TIME-WAIT",
               State.CLOSE: "UNCONN", State.CLOSE_WAIT: "CLOSE-WAIT",
               State.LAST_ACK: "LAST-ACK", State.LISTEN: "LISTEN", State.CLOSING: "CLOSING",
               State.NEW_SYN_RECV: "SYN-RECV"}


def _addr(raw: bytes | None, family: int) -> str:
    if not raw:
        return "0.0.0.0" if family == socket.AF_INET else "::"
    if family == socket.AF_INET:
        raw = unmapped(raw)
    return socket.inet_ntop(socket.AF_INET if len(raw) == 4 else socket.AF_INET6, raw)


def _entry(proto: str, sk: Any, state: str, recv_q: int, send_q: int) -> dict[str, Any]:
    family = getattr(sk, "family", socket.AF_INET)
    return {"proto": proto, "family": 6 if family == socket.AF_INET6 else 4,
            "state": state, "recv_q": recv_q, "send_q": send_q,
            "local": [_addr(getattr(sk, "laddr", None), family), getattr(sk, "lport", 0)],
            "peer": [_addr(getattr(sk, "faddr", None), family), getattr(sk, "fport", 0)]}


def tcp_info(conn: Any) -> dict[str, Any]:
    """The fields ``ss -i`` prints that rcunet's Connection keeps (ms as ss shows them)."""
    info: dict[str, Any] = {}
    rto = getattr(conn, "rto", None)
    tcb = getattr(conn, "tcb", None)
    cc = getattr(conn, "cc", None)
    mss = getattr(tcb, "snd_mss", 0) or 1
    if rto is not None:
        info["rto"] = rto.rto / NS_PER_MS
        if rto.srtt is not None:
            info["rtt"] = [rto.srtt / NS_PER_MS, rto.rttvar / NS_PER_MS]
    info["mss"] = mss
    if cc is not None:
        info["cwnd"] = max(1, cc.cwnd // mss)
        if cc.ssthresh < 1 << 30:
            info["ssthresh"] = max(1, cc.ssthresh // mss)
    if tcb is not None:
        info["snd_wnd"] = tcb.snd_wnd
    options = getattr(conn, "options", None)
    if options is not None:
        info["cc"] = options.congestion_control
    return info


def _tcp_conn_entry(sk: Any) -> dict[str, Any]:
    conn = getattr(sk, "conn", None)
    state = STATE_NAMES.get(State(sk.state), str(sk.state))
    if conn is None:
        return _entry("tcp", sk, state, 0, 0)
    recv_q = int(getattr(conn, "readable", 0))  # a property: bytes not yet read
    send_q = len(getattr(conn, "_tx", ()))
    entry = _entry("tcp", sk, state, recv_q, send_q)
    entry["info"] = tcp_info(conn)
    entry["info"].update(_tcp_totals(sk))
    return entry


#: The TCP_INFO counters ``ss -i`` prints after ssthresh, by their tcpi_ names.
SS_TOTALS = ("bytes_sent", "bytes_retrans", "bytes_acked", "bytes_received", "segs_out",
             "segs_in", "data_segs_out", "data_segs_in", "last_data_sent", "last_data_recv",
             "last_ack_recv", "delivered", "busy_time", "unacked", "retrans",
             "total_retrans", "lost", "sacked", "dsack_dups", "reordering", "reord_seen",
             "rcv_rtt", "rcv_space", "notsent_bytes", "min_rtt", "rcv_ooopack", "rcv_wnd")


def _tcp_totals(sk: Any) -> dict[str, int]:
    """The socket's TCP_INFO counters (host/tcp/info.py), read under its socket lock as
    getsockopt(TCP_INFO) reads them."""
    if not hasattr(sk, "_lock"):
        return {}
    since = sk._lock()
    try:
        values = tcp_info_snapshot(sk, sk.host.now())
    finally:
        sk._unlock(since)
    return {name: values["tcpi_" + name] for name in SS_TOTALS if "tcpi_" + name in values}


def sockets(host: Any) -> dict[str, Any]:
    hashinfo = host.tcp.hashinfo
    rows: list[dict[str, Any]] = []
    for sk in hashinfo.listen.listeners():
        rows.append(_entry("tcp", sk, "LISTEN", len(getattr(sk, "acceptq", ())),
                           getattr(sk, "max_ack_backlog", 0)))
    for sk in hashinfo.ehash.entries():
        if int(sk.state) == State.TIME_WAIT:
            rows.append(_entry("tcp", sk, "TIME-WAIT", 0, 0))
        else:
            rows.append(_tcp_conn_entry(sk))
    for sk in host.udp.table.entries():
        connected = bool(getattr(sk, "fport", 0))
        rows.append(_entry("udp", sk, "ESTAB" if connected else "UNCONN",
                           getattr(sk, "rmem", 0), 0))
    return {"host": host.name, "sockets": rows, "tables": tables(host)}


def tables(host: Any) -> dict[str, int]:
    """Table sizes for the summary (``ss -s``) and the soak: entries, TIME_WAIT, timers."""
    hashinfo = host.tcp.hashinfo
    ehash = hashinfo.ehash
    with host.tcp._sockets_lock:
        live = len(host.tcp.sockets)
    return {"ehash": len(ehash), "timewait": ehash.tw_count(),
            "listeners": len(hashinfo.listen.listeners()),
            "udp": len(host.udp.table.entries()), "tcp_sockets": live,
            "timers": len(host.timers), "counter_shards": host.counters.live_shards()}


def counters(host: Any) -> dict[str, Any]:
    return {"host": host.name, "counters": host.counters.snapshot()}


def lock_stat() -> str | None:
    """/proc/lock_stat's text when statistics are on, else None."""
    from rcunet.sync import lockstat

    if not lockstat.enabled():
        return None
    return lockstat.format_lock_stat(lockstat.snapshot())
