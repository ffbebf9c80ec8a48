"""iproute2 ``ss`` layout for the sockets a control socket reports.

Filters as ss has them: ``-t``/``-u`` pick protocols (both when neither is given);
by default connected sockets only (not LISTEN, not unconnected UDP, not TIME-WAIT or
SYN-RECV: ss's SS_CONN), ``-l`` listening ones only (LISTEN, unconnected UDP), ``-a``
all.  ``-i`` adds the tcp_info line under each TCP connection, ``-s`` prints the
summary instead.  Addresses are numeric (ss -n); IPv6 in brackets.
"""

from __future__ import annotations

from typing import Any

LISTENING = ("LISTEN", "UNCONN")
NOT_CONNECTED = ("LISTEN", "UNCONN", "TIME-WAIT", "SYN-RECV")


def select(rows: list[dict[str, Any]], *, tcp: bool, udp: bool, listening: bool,
           everything: bool) -> list[dict[str, Any]]:
    protos = {"tcp"} if tcp and not udp else {"udp"} if udp and not tcp else {"tcp", "udp"}
    chosen = []
    for row in rows:
        if row["proto"] not in protos:
            continue
        if everything or (listening and row["state"] in LISTENING) or (
                not listening and row["state"] not in NOT_CONNECTED):
            chosen.append(row)
    return chosen


def _host(address: str, version: int) -> str:
    return f"[{address}]" if version == 6 else address


def _port(port: int) -> str:
    return str(port) if port else "*"


def _g(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".") if value % 1 else str(int(value))


def info_line(info: dict[str, Any]) -> str:
    """``\\t cubic rto:204 rtt:0.035/0.019 mss:1448 cwnd:10 ...`` as ss -i prints."""
    parts = [info.get("cc", "")]
    if "rto" in info:
        parts.append(f"rto:{_g(info['rto'])}")
    if "rtt" in info:
        parts.append(f"rtt:{_g(info['rtt'][0])}/{_g(info['rtt'][1])}")
    parts.append(f"mss:{info['mss']}")
    if "cwnd" in info:
        parts.append(f"cwnd:{info['cwnd']}")
    if "ssthresh" in info:
        parts.append(f"ssthresh:{info['ssthresh']}")
    parts.extend(_totals(info))
    if "snd_wnd" in info:
        parts.append(f"snd_wnd:{info['snd_wnd']}")
    if info.get("rcv_wnd"):
        parts.append(f"rcv_wnd:{info['rcv_wnd']}")
    return "\t " + " ".join(p for p in parts if p)


#: ss's name for a TCP_INFO counter it prints as it is, when it is not zero (misc/ss.c
#: tcp_stats_print), in ss's order.
_COUNTS = (("bytes_sent", "bytes_sent"), ("bytes_retrans", "bytes_retrans"),
           ("bytes_acked", "bytes_acked"), ("bytes_received", "bytes_received"),
           ("segs_out", "segs_out"), ("segs_in", "segs_in"),
           ("data_segs_out", "data_segs_out"), ("data_segs_in", "data_segs_in"),
           ("last_data_sent", "lastsnd"), ("last_data_recv", "lastrcv"),
           ("last_ack_recv", "lastack"), ("delivered", "delivered"))


def _totals(info: dict[str, Any]) -> list[str]:
    """The counters ss -i prints between ssthresh and snd_wnd, each only when set as ss
    does (reordering only when not the default 3; times in ms, RTTs as ms decimals)."""
    parts = [f"{label}:{info[name]}" for name, label in _COUNTS if info.get(name)]
    if info.get("busy_time"):
        parts.append(f"busy:{info['busy_time'] // 1000}ms")
    if info.get("unacked"):
        parts.append(f"unacked:{info['unacked']}")
    if info.get("retrans") or info.get("total_retrans"):
        parts.append(f"retrans:{info.get('retrans', 0)}/{info.get('total_retrans', 0)}")
    for name in ("lost", "sacked", "dsack_dups"):
        if info.get(name):
            parts.append(f"{name}:{info[name]}")
    if info.get("reordering", 3) != 3:
        parts.append(f"reordering:{info['reordering']}")
    if info.get("reord_seen"):
        parts.append(f"reord_seen:{info['reord_seen']}")
    if info.get("rcv_rtt"):
        parts.append(f"rcv_rtt:{_g(info['rcv_rtt'] / 1000)}")
    if info.get("rcv_space"):
        parts.append(f"rcv_space:{info['rcv_space']}")
    if info.get("notsent_bytes"):
        parts.append(f"notsent:{info['notsent_bytes']}")
    if info.get("min_rtt") and info["min_rtt"] != 0xFFFFFFFF:
        parts.append(f"minrtt:{_g(info['min_rtt'] / 1000)}")
    if info.get("rcv_ooopack"):
        parts.append(f"rcv_ooopack:{info['rcv_ooopack']}")
    return parts


def table(rows: list[dict[str, Any]], *, show_info: bool) -> str:
    netid = len({row["proto"] for row in rows}) > 1
    locals_ = [(_host(r["local"][0], r["family"]), _port(r["local"][1])) for r in rows]
    peers = [(_host(r["peer"][0], r["family"]), _port(r["peer"][1])) for r in rows]
    state_w = max([len("State")] + [len(r["state"]) for r in rows])
    la_w = max([len("Local Address")] + [len(a) for a, _ in locals_])
    lp_w = max([len("Port")] + [len(p) for _, p in locals_])
    pa_w = max([len("Peer Address")] + [len(a) for a, _ in peers])
    pp_w = max([len("Port")] + [len(p) for _, p in peers])
    head = (f"{'Netid':<5} " if netid else "") + f"{'State':<{state_w}} Recv-Q Send-Q " \
        f"{'Local Address':>{la_w}}:{'Port':<{lp_w}} {'Peer Address':>{pa_w}}:" \
        f"{'Port':<{pp_w}} Process"
    lines = [head]
    for row, (la, lp), (pa, pp) in zip(rows, locals_, peers, strict=True):
        lines.append((f"{row['proto']:<5} " if netid else "")
                     + f"{row['state']:<{state_w}} {row['recv_q']:<6} {row['send_q']:<6} "
                     f"{la:>{la_w}}:{lp:<{lp_w}} {pa:>{pa_w}}:{pp:<{pp_w}}")
        if show_info and "info" in row:
            lines.append(info_line(row["info"]))
    return "\n".join(lines)


def summary(rows: list[dict[str, Any]]) -> str:
    """``ss -s``."""
    def count(proto: str, version: int | None = None) -> int:
        return sum(1 for r in rows if r["proto"] == proto
                   and (version is None or r["family"] == version))

    tcp = [r for r in rows if r["proto"] == "tcp"]
    estab = sum(1 for r in tcp if r["state"] == "ESTAB")
    timewait = sum(1 for r in tcp if r["state"] == "TIME-WAIT")
    lines = [f"Total: {len(rows)}",
             f"TCP:   {len(tcp)} (estab {estab}, closed 0, orphaned 0, timewait {timewait})",
             "", "Transport Total     IP        IPv6"]

    def row(name: str, total: int, v4: int, v6: int) -> str:
        return f"{name}\t  {total:<9} {v4:<9} {v6:<9}"

    lines.append(row("RAW", 0, 0, 0))
    lines.append(row("UDP", count("udp"), count("udp", 4), count("udp", 6)))
    lines.append(row("TCP", count("tcp"), count("tcp", 4), count("tcp", 6)))
    lines.append(row("INET", len(rows), sum(r["family"] == 4 for r in rows),
                     sum(r["family"] == 6 for r in rows)))
    lines.append(row("FRAG", 0, 0, 0))
    return "\n".join(lines)
