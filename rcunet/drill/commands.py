"""Backtick commands through a whitelist: the kernel selftests' and packetdrill's
``defaults.sh``, ``sysctl`` (onto the Host's ``Tuning`` under Linux's names),
``nstat`` (onto the Host's counters), ``echo V > FILE`` into a /proc/sys file or
a tcp_cubic module parameter, ``ip link set dev IFACE mtu N`` (the Host's
interface MTU) and ``ethtool -K IFACE tso off ...`` (offloads rcunet does not have).
Anything else makes the script unsupported, with the command named: the engine never
runs a shell."""

from __future__ import annotations

import dataclasses
import re
import shlex
from typing import TYPE_CHECKING

from rcunet.core.tcp import fastopen
from rcunet.core.tcp.congestion.cubic_params import WRITABLE
from rcunet.drill.errors import DrillUnsupported
from rcunet.wire.addr import is_v4mapped

if TYPE_CHECKING:
    from rcunet.host.host import Host

#: defaults.sh of the kernel selftests and of packetdrill's gtests: the sysctls it sets.
DEFAULTS_SH = (
    ("net.ipv4.tcp_rmem", "4096 540000 15728640"),
    ("net.ipv4.tcp_wmem", "4096 262144 4194304"),
    ("net.ipv4.tcp_timestamps", "1"),
    ("net.ipv4.tcp_syn_retries", "5"),
    ("net.ipv4.tcp_synack_retries", "5"),
    ("net.ipv4.tcp_frto", "2"),
    ("net.ipv4.tcp_sack", "1"),
    ("net.ipv4.tcp_dsack", "1"),
    ("net.ipv4.tcp_fack", "0"),
    ("net.ipv4.tcp_reordering", "3"),
    ("net.ipv4.tcp_congestion_control", "cubic"),
    ("net.ipv4.tcp_slow_start_after_idle", "0"),
    ("net.ipv4.tcp_early_retrans", "4"),
    ("net.ipv4.tcp_recovery", "1"),
    ("net.ipv4.tcp_tso_win_divisor", "3"),
    ("net.ipv4.tcp_ecn", "0"),
    ("net.ipv4.tcp_pacing_ss_ratio", "200"),
    ("net.ipv4.tcp_pacing_ca_ratio", "120"),
    ("net.ipv4.tcp_notsent_lowat", "4294967295"),
    ("net.ipv4.tcp_fastopen", "0x3"),
    ("net.ipv4.tcp_fastopen_key", "a1a1a1a1-b2b2b2b2-c3c3c3c3-d4d4d4d4"),
    ("net.ipv4.tcp_syncookies", "1"),
)

#: google/packetdrill's gtests/net/common/defaults.sh differs from the kernel's in these:
#: Fast Open for every listener (0x400) with cookies, and 0x70000 (ignored by Linux).
GTESTS_DEFAULTS_SH = tuple(
    (key, "0x70403" if key == "net.ipv4.tcp_fastopen" else value)
    for key, value in DEFAULTS_SH)

#: sysctl name -> Tuning field and how to read the value.
_TUNING: dict[str, tuple[str, str]] = {
    "net.ipv4.tcp_rmem": ("tcp_rmem", "triple"),
    "net.ipv4.tcp_wmem": ("tcp_wmem", "triple"),
    "net.ipv4.tcp_timestamps": ("tcp_timestamps", "bool"),
    "net.ipv4.tcp_sack": ("tcp_sack", "bool"),
    "net.ipv4.tcp_window_scaling": ("tcp_window_scaling", "bool"),
    "net.ipv4.tcp_syn_retries": ("tcp_syn_retries", "int"),
    "net.ipv4.tcp_synack_retries": ("tcp_synack_retries", "int"),
    "net.ipv4.tcp_syncookies": ("tcp_syncookies", "int"),
    "net.ipv4.tcp_retries2": ("tcp_retries2", "int"),
    "net.ipv4.tcp_fin_timeout": ("tcp_fin_timeout", "float"),
    "net.ipv4.tcp_keepalive_time": ("tcp_keepalive_time", "float"),
    "net.ipv4.tcp_keepalive_intvl": ("tcp_keepalive_intvl", "float"),
    "net.ipv4.tcp_keepalive_probes": ("tcp_keepalive_probes", "int"),
    "net.ipv4.tcp_notsent_lowat": ("tcp_notsent_lowat", "int"),
    "net.ipv4.tcp_tw_reuse": ("tcp_tw_reuse", "int"),
    "net.ipv4.tcp_max_syn_backlog": ("tcp_max_syn_backlog", "int"),
    "net.ipv4.tcp_max_tw_buckets": ("tcp_max_tw_buckets", "int"),
    "net.ipv4.tcp_moderate_rcvbuf": ("tcp_moderate_rcvbuf", "bool"),
    "net.ipv4.tcp_shrink_window": ("tcp_shrink_window", "bool"),
    "net.ipv4.tcp_rcvbuf_low_rtt": ("tcp_rcvbuf_low_rtt", "int"),
    "net.ipv4.tcp_congestion_control": ("tcp_congestion_control", "cc"),
    "net.core.somaxconn": ("somaxconn", "int"),
    "net.core.rmem_max": ("rmem_max", "int"),
    "net.core.wmem_max": ("wmem_max", "int"),
    "net.ipv4.ip_local_port_range": ("ip_local_port_range", "pair"),
    "net.ipv4.tcp_fastopen": ("tcp_fastopen", "int"),
    "net.ipv4.tcp_fastopen_key": ("tcp_fastopen_key", "tfo_key"),
    "net.ipv4.tcp_ecn": ("tcp_ecn", "int"),
    "net.ipv4.tcp_ecn_fallback": ("tcp_ecn_fallback", "bool"),
    "net.ipv4.tcp_ecn_option": ("tcp_ecn_option", "int"),
    "net.ipv4.tcp_ecn_option_beacon": ("tcp_ecn_option_beacon", "int"),
    "net.ipv4.tcp_recovery": ("tcp_recovery", "int"),
    "net.ipv4.tcp_early_retrans": ("tcp_early_retrans", "int"),
    "net.ipv4.tcp_rto_max_ms": ("tcp_rto_max_ms", "int"),
    "net.ipv4.tcp_rto_min_us": ("tcp_rto_min_us", "int"),
    "net.ipv4.tcp_frto": ("tcp_frto", "int"),
    "net.ipv4.tcp_min_tso_segs": ("tcp_min_tso_segs", "int"),
    "net.ipv4.tcp_slow_start_after_idle": ("tcp_slow_start_after_idle", "bool"),
}

#: Integer sysctls with Linux's proc_dointvec_minmax bounds: a value outside them is
#: refused (EINVAL: sysctl fails and the setting stays).
_BOUNDS: dict[str, tuple[int, int]] = {
    "net.ipv4.tcp_rto_max_ms": (1000, 120000),  # TCP_RTO_MAX_MIN_SEC s .. TCP_RTO_MAX_SEC s
    "net.ipv4.tcp_rto_min_us": (1, 0x7FFFFFFF),  # SYSCTL_ONE .. INT_MAX
    "net.ipv4.tcp_min_tso_segs": (1, 255),  # proc_dou8vec_minmax, SYSCTL_ONE
}

#: Linux sysctls rcunet has no switch for, with the values whose behaviour it has (or
#: which do not apply to a single virtual link: pacing ratios, TSO, qdisc-less output).
#: Any other value makes the script unsupported.
_FIXED: dict[str, frozenset[str]] = {
    "net.ipv4.tcp_dsack": frozenset({"1"}),
    "net.ipv4.tcp_fack": frozenset({"0"}),
    "net.ipv4.tcp_reordering": frozenset({"3"}),
    "net.ipv4.tcp_tso_win_divisor": frozenset(),
    "net.ipv4.tcp_pacing_ss_ratio": frozenset({"200"}),
    "net.ipv4.tcp_pacing_ca_ratio": frozenset({"120"}),
    "net.ipv4.tcp_notsent_lowat": frozenset({"4294967295"}),
    # Linux defaults whose mechanisms rcunet lacks (Fast Open's blackhole detection): a
    # script that depends on them fails on the packets, which is the finding to report.
    "net.ipv4.tcp_fastopen_blackhole_timeout_sec": frozenset(),
}
_CC = {"cubic", "reno", "newreno"}
#: ethtool -K features rcunet's interfaces never have: TCP/generic segmentation
#: offload, generic/large receive offload (``Commands._ethtool``).
_OFFLOADS = frozenset({"tso", "gso", "gro", "lro"})
#: The directory of the tcp_cubic module's parameters (``Commands.module_param``).
_CUBIC_PARAMS = "/sys/module/tcp_cubic/parameters/"
_REDIRECT = re.compile(r"\s*(?:[12&]?>\s*/dev/null|2>&1)")
_ARITH = re.compile(r"\$\(\(([^()]*)\)\)")


def _arith(line: int, expr: str) -> int:
    """The shell's $((...)) for the integer products and sums sysctl lines use."""
    if not re.fullmatch(r"[0-9+*\- ]+", expr):
        raise DrillUnsupported(line, f"shell arithmetic $(({expr}))")
    total = 0
    for term in re.findall(r"[+-]?[^+-]+", expr.replace(" ", "")):
        product = 1
        for factor in term.lstrip("+-").split("*"):
            product *= int(factor)
        total += -product if term.startswith("-") else product
    return total


#: The /proc files ``proc_net_tcp`` renders, with the address length each lists.
_PROC_NET_TCP = {"/proc/net/tcp": 4, "/proc/net/tcp6": 16}


def proc_net_tcp(host: Host, path: str) -> list[str]:
    """The lines of /proc/net/tcp or /proc/net/tcp6 (tcp4_seq_show, tcp6_seq_show) for
    the Host's listeners and ehash entries: slot, local and remote address:port in hex
    (each 32-bit word in the host's byte order, as the kernel prints it), state in
    hex; the queue, timer, uid and inode columns are zero."""
    size = _PROC_NET_TCP[path]
    hashinfo = host.tcp.hashinfo
    out = ["  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt"
           "   uid  timeout inode"]
    entries = [*hashinfo.listen.listeners(), *hashinfo.ehash.entries()]
    for sk in entries:
        laddr = sk.laddr if len(sk.laddr) == size else None
        if size == 4 and laddr is None and is_v4mapped(sk.laddr):
            continue  # a dual-stack socket is listed in tcp6
        if laddr is None:
            continue
        raddr = sk.faddr if sk.faddr and len(sk.faddr) == size else bytes(size)
        out.append(f"{len(out) - 1:4d}: {_proc_addr(laddr)}:{sk.lport:04X} "
                   f"{_proc_addr(raddr)}:{sk.fport:04X} {int(sk.state):02X} "
                   "00000000:00000000 00:00000000 00000000     0        0 0")
    return out


def _proc_addr(raw: bytes) -> str:
    """An address as /proc/net/tcp prints it: each 32-bit word as a native integer."""
    return "".join(f"{int.from_bytes(raw[i:i + 4], 'little'):08X}"
                   for i in range(0, len(raw), 4))


class Commands:
    def __init__(self, host: Host) -> None:
        self.host = host
        self._nstat_base: dict[str, int] = {}

    def run(self, line: int, command: str) -> int:
        """Run ``command`` (a shell line); its exit status."""
        status = 0
        command = re.sub(r"#[^\n]*", "", command)  # shell comments
        command = command.replace("\\\n", " ")
        for part in re.split(r"\s*(?:;|&&|\n)\s*", command.strip()):
            if part.strip():
                status = self._either(line, part.strip())
                if status and "&&" in command:
                    return status
        return status

    def _either(self, line: int, part: str) -> int:
        """``a || b``: b runs when a fails, or when a is something rcunet has no
        setting for (the shell would have seen it fail)."""
        first, sep, rest = part.partition("||")
        if not sep:
            return self._one(line, part)
        try:
            status = self._one(line, first.strip())
        except DrillUnsupported:
            status = 1
        return status if status == 0 else self._either(line, rest.strip())

    def _one(self, line: int, text: str) -> int:
        quiet = _ARITH.sub(lambda m: str(_arith(line, m.group(1))),
                           _REDIRECT.sub("", text)).strip()
        if "|" in quiet:
            return self._pipeline(line, quiet)
        try:
            words = shlex.split(quiet)
        except ValueError:
            raise DrillUnsupported(line, f"command `{text}`") from None
        if not words:
            return 0
        name = words[0].rsplit("/", 1)[-1]
        if name == "defaults.sh":
            gtests = words[0].endswith("common/defaults.sh")
            for key, value in GTESTS_DEFAULTS_SH if gtests else DEFAULTS_SH:
                self.sysctl(line, key, value)
            return 0
        if name == "sysctl":
            return self._sysctl_command(line, words[1:])
        if name == "set_sysctls.py":
            for arg in words[1:]:
                path, _, value = arg.partition("=")
                key = path.removeprefix("/proc/sys/").replace("/", ".")
                self.sysctl(line, key, value)
            return 0
        if name == "nstat":
            self._nstat(words[1:])
            return 0
        if words[:3] == ["ip", "tcp_metrics", "flush"]:
            self.host.tcp.fastopen.cache.clear()  # the metrics rcunet keeps: Fast Open's
            return 0
        if name == "ethtool":
            return self._ethtool(line, text, words[1:])
        if words[:3] == ["ip", "link", "set"]:
            return self._ip_link_set(line, text, words[3:])
        if name == "echo" and len(words) == 4 and words[2] == ">":
            return self._echo_into(line, text, words[1], words[3])
        if name == "tc":
            return self._tc(line, text, words[1:])
        if name.startswith("sysctl_restore_"):
            return 0  # a fresh Host per run: nothing to undo
        raise DrillUnsupported(line, f"command `{text}` is not supported")

    def _tc(self, line: int, text: str, args: list[str]) -> int:
        """``tc qdisc``: rcunet's link is one FIFO that never fills at a script's load, so
        deleting the root qdisc or making it a pfifo changes nothing.  A qdisc that
        changes what TCP sees is refused by name: fq paces each flow at its
        sk_pacing_rate, and a pfifo of limit 0 drops every packet with the local-drop
        feedback (NET_XMIT_DROP) TCP counts; the links give neither."""
        if args[:1] != ["qdisc"] or len(args) < 2:
            raise DrillUnsupported(line, f"command `{text}` is not supported")
        verb, rest = args[1], args[2:]
        if verb in ("del", "delete"):
            return 0
        kind = rest[rest.index("root") + 1] if "root" in rest[:-1] else None
        if verb in ("add", "replace", "change") and kind == "pfifo":
            limit = rest[rest.index("limit") + 1] if "limit" in rest[:-1] else None
            if limit is None or limit.isdigit() and int(limit) > 0:
                return 0
            raise DrillUnsupported(line, "tc qdisc pfifo limit 0 (local drops with "
                                         "NET_XMIT_DROP feedback)")
        if kind == "fq":
            raise DrillUnsupported(line, "tc qdisc fq (pacing at sk_pacing_rate)")
        raise DrillUnsupported(line, f"command `{text}` is not supported")

    def _echo_into(self, line: int, text: str, value: str, path: str) -> int:
        """``echo VALUE > FILE`` for the files that are settings: a /proc/sys file is
        its sysctl, a /sys/module/tcp_cubic/parameters file one of CUBIC's module
        parameters (``module_param``).  Any other file is unsupported."""
        if path.startswith("/proc/sys/"):
            return self.sysctl(line, path.removeprefix("/proc/sys/"), value)
        if path.startswith(_CUBIC_PARAMS):
            return self.module_param(path.removeprefix(_CUBIC_PARAMS), value)
        raise DrillUnsupported(line, f"command `{text}` is not supported")

    def module_param(self, name: str, value: str) -> int:
        """Write one tcp_cubic module parameter as sysfs does (param_set_int: an
        integer in any base kstrtoint reads); the shell's status: 1 when the file does
        not exist, is read-only (0444) or the value is not an integer, as echo fails."""
        params = self.host.tuning.tcp_cubic
        if name not in WRITABLE:
            return 1
        try:
            number = int(value, 0)
        except ValueError:
            return 1
        if not -(1 << 31) <= number < (1 << 31):
            return 1  # kstrtoint: -ERANGE
        cubic = dataclasses.replace(params, **{name: number})
        self.host.set_tuning(dataclasses.replace(self.host.tuning, tcp_cubic=cubic))
        return 0

    def _ethtool(self, line: int, text: str, args: list[str]) -> int:
        """``ethtool -K IFACE FEATURE off ...`` for the segmentation offloads: rcunet's
        interfaces have none (TCP hands IP one MSS-sized segment at a time), so turning
        them off changes nothing; turning one on, or any other request, is unsupported."""
        if len(args) < 4 or args[0] != "-K" or len(args) % 2:
            raise DrillUnsupported(line, f"command `{text}` is not supported")
        try:
            self.host.interface(args[1])
        except KeyError:
            return 1  # ethtool: no such device
        pairs = list(zip(args[2::2], args[3::2], strict=True))
        if any(feature not in _OFFLOADS or state != "off" for feature, state in pairs):
            raise DrillUnsupported(line, f"command `{text}` is not supported")
        return 0

    def _ip_link_set(self, line: int, text: str, args: list[str]) -> int:
        """``ip link set [dev] IFACE mtu N``: the Host's interface MTU (Host.set_mtu);
        status 2 (ip's own) when the interface is unknown or the MTU out of range."""
        if args[:1] == ["dev"]:
            args = args[1:]
        if len(args) != 3 or args[1] != "mtu" or not args[2].isdigit():
            raise DrillUnsupported(line, f"command `{text}` is not supported")
        try:
            self.host.set_mtu(args[0], int(args[2]))
        except (KeyError, OSError):
            return 2
        return 0

    def _pipeline(self, line: int, text: str) -> int:
        """``nstat [-n|-s|-a] | grep [-q] PATTERN [| grep [-q] PATTERN ...]``: nstat's
        lines (name, value, rate) filtered by each grep; status 0 when a line is left.
        ``grep PATTERN /proc/net/tcp /proc/net/tcp6 | grep ...`` reads the Host's TCP
        sockets as those files list them (``proc_net_tcp``)."""
        stages = [shlex.split(part) for part in text.split("|")]
        words = stages[0]
        if words[:1] == ["grep"] and len(words) >= 3 and all(
                path in _PROC_NET_TCP for path in words[2:]):
            lines = [f"{path}:{entry}" if len(words) > 3 else entry
                     for path in words[2:] for entry in proc_net_tcp(self.host, path)]
            stages = [["grep", words[1]], *stages[1:]]
        elif not words or words[0] != "nstat" or len(stages) < 2:
            raise DrillUnsupported(line, f"command `{text}` is not supported")
        else:
            shown = self._nstat(words[1:])
            lines = [f"{name:<31} {value:<15} {0.0:>6.1f}" for name, value in shown.items()]
        for grep in stages[1:] if words[0] == "nstat" else stages:
            args = [a for a in grep[1:] if a != "-q"]
            if not grep or grep[0] != "grep" or len(args) != 1:
                raise DrillUnsupported(line, f"command `{text}` is not supported")
            try:
                pattern = re.compile(args[0])
            except re.error:
                raise DrillUnsupported(line, f"grep pattern {args[0]!r}") from None
            lines = [text_line for text_line in lines if pattern.search(text_line)]
        return 0 if lines else 1

    def _nstat(self, args: list[str]) -> dict[str, int]:
        """nstat: counters changed since the last call (nonzero deltas); -s leaves the
        history as it was, -a shows absolute values."""
        now = self.host.counters.snapshot()
        if "-a" in args or "--ignore" in args:
            base: dict[str, int] = {}
        else:
            base = self._nstat_base
        if "-s" not in args:
            self._nstat_base = dict(now)
        return {k: v - base.get(k, 0) for k, v in now.items() if v - base.get(k, 0)}

    def _sysctl_command(self, line: int, args: list[str]) -> int:
        for arg in args:
            if arg.startswith("-"):
                if arg not in ("-q", "-w", "-e"):
                    raise DrillUnsupported(line, f"sysctl option {arg}")
                continue
            key, sep, value = arg.partition("=")
            if not sep:
                raise DrillUnsupported(line, f"sysctl read of {key}")
            status = self.sysctl(line, key, value)
            if status:
                return status
        return 0

    def sysctl(self, line: int, key: str, value: str) -> int:
        """Set one sysctl; its status: 0, or 1 when Linux would refuse the value."""
        key = key.replace("/", ".")
        value = " ".join(value.split())
        if key in _TUNING:
            field, kind = _TUNING[key]
            return self._set(line, key, field, kind, value)
        allowed = _FIXED.get(key)
        if allowed is not None and (not allowed or value.lower() in allowed):
            return 0
        raise DrillUnsupported(line, f"sysctl {key}={value} (rcunet has no such setting)")

    def _set(self, line: int, key: str, field: str, kind: str, value: str) -> int:
        try:
            parsed: object
            if kind == "triple":
                a, b, c = (int(x) for x in value.split())
                parsed = (a, b, c)
            elif kind == "pair":
                a, b = (int(x) for x in value.split())
                parsed = (a, b)
            elif kind == "bool":
                parsed = bool(int(value, 0))
            elif kind == "int":
                parsed = int(value, 0)
            elif kind == "float":
                parsed = float(value)
            elif kind == "tfo_key":
                parsed = fastopen.parse_key_text(value)
            else:
                if value not in _CC:
                    raise DrillUnsupported(line, f"congestion control {value}")
                parsed = "reno" if value in ("reno", "newreno") else value
        except ValueError:
            raise DrillUnsupported(line, f"sysctl {key}={value}: bad value") from None
        bounds = _BOUNDS.get(key)
        if bounds is not None and isinstance(parsed, int) \
                and not bounds[0] <= parsed <= bounds[1]:
            return 1
        tuning = dataclasses.replace(self.host.tuning, **{field: parsed})
        self.host.set_tuning(tuning)
        return 0
