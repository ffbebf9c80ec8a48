"""Play a script's remote host against one rcunet Host on the virtual clock.

The event loop follows packetdrill's ``run.c``: relative times are anchored as
``adjust_relative_event_times`` anchors them, outbound packets are checked field by field
as ``run_packet.c`` checks them (sequence numbers, ACKs, SACK blocks and TS values mapped
between script and live space), system calls as ``run_system_call.c`` (a blocking call
with an end time runs beside the script), and every time with ``verify_time``'s
tolerance: ``max(tolerance_usecs, tolerance_percent * (t - t_previous_event))``.
"""

from __future__ import annotations

import copy
import ipaddress
import struct
from dataclasses import dataclass, field
from typing import Any

from rcunet.drill import frames as fr
from rcunet.drill import script as s
from rcunet.drill.code import CodeFailure, run_code
from rcunet.drill.commands import Commands
from rcunet.drill.errors import DrillError, DrillFailure, DrillUnsupported
from rcunet.drill.syscalls import BLOCKED, ERRNO_NAMES, Fd, Outcome, Syscalls, errno_name
from rcunet.host.clock import VirtualClock
from rcunet.host.host import Host
from rcunet.host.tcp import meminfo
from rcunet.host.tcp.info import snapshot
from rcunet.wire import tcp_md5

#: The kernel selftests' runner (ksft_runner.sh) addresses and MTUs, per family.
KERNEL_RUNNER = {
    4: {"local_ip": "192.168.0.1", "remote_ip": "192.0.2.1", "prefix": 16, "mtu": 1500},
    6: {"local_ip": "fd3d:a0b:17d6::1", "remote_ip": "fd3d:fa7b:d17d::1", "prefix": 48,
        "mtu": 1520},
}
#: No outbound packet this long after its expected time: the sniff times out
#: (sniff_outbound_live_packet waits the expected delay plus 2 s).
SNIFF_SLACK_USECS = 2_000_000
#: await_idle_thread: a second blocking call waits at most this long for the first.
AWAIT_IDLE_USECS = 1_000_000
#: A blocking call with nothing left that could wake it fails after this much virtual time.
BLOCK_LIMIT_USECS = 3600 * 1_000_000
_TCP_FLAG_FIELDS = (("tcp_fin", 0x01), ("tcp_syn", 0x02), ("tcp_rst", 0x04),
                    ("tcp_psh", 0x08), ("tcp_ack", 0x10), ("tcp_urg", 0x20),
                    ("tcp_ece", 0x40), ("tcp_cwr", 0x80), ("tcp_ae", 0x100))
_STRICT_ONLY = {"tcp_fin", "tcp_psh", "tcp_cwr"}
_ICMP4 = {"unreachable": 3, "time_exceeded": 11, "source_quench": 4, "echo_reply": 0,
          "echo_request": 8, "parameter_problem": 12}
_ICMP4_CODES = {"net_unreachable": 0, "host_unreachable": 1, "protocol_unreachable": 2,
                "port_unreachable": 3, "frag_needed": 4, "source_route_failed": 5,
                "net_unknown": 6, "host_unknown": 7, "net_prohibited": 9,
                "host_prohibited": 10, "ttl_exceeded": 0, "": 0}


#: The -D definitions the corpora's runners pass (the kernel's ksft_runner.sh, google's
#: run_all.py): the Fast Open cookies Linux computes for the runner's addresses with
#: defaults.sh's key (TFO_COOKIE) and with the all-zero key (TFO_COOKIE_ZERO), and the
#: ICMP code run_all.py gives its IPv4 runs.  A script's own -D lines override them.
RUNNER_DEFINES = {
    4: {"TFO_COOKIE": "3021b9d889017eeb", "TFO_COOKIE_ZERO": "b7c12350a90dc8f5",
        "CODE": "host_unreachable", "CMSG_LEVEL_IP": "SOL_IP",
        "CMSG_TYPE_RECVERR": "IP_RECVERR"},
    6: {"TFO_COOKIE": "c1d1e9742a47a9bc", "TFO_COOKIE_ZERO": "82af1a8f9a205c34",
        "CMSG_LEVEL_IP": "SOL_IPV6", "CMSG_TYPE_RECVERR": "IPV6_RECVERR"},
}


@dataclass
class Config:
    family: int = 4
    tolerance_usecs: int = 4000
    tolerance_percent: float = 12.5
    mss: int = 0
    strict_segments: bool = False
    tcp_ts_tick_usecs: int = 0
    local_ip: str = ""
    remote_ip: str = ""
    mtu: int = 0
    bind_port: int = 8080
    connect_port: int = 8080
    defines: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    path: str
    family: int
    status: str  #: pass, fail, unsupported, error
    line: int = 0
    message: str = ""
    exchange: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status == "pass"


@dataclass
class DrillSocket:
    """packetdrill's ``struct socket``: the script's view of one connection."""

    state: str = "new"  # new listening passive_rcvd synack_sent connecting syn_sent
    fd: Fd | None = None
    local_port: int = 0
    remote_port: int = 0
    script_local_isn: int = 0
    live_local_isn: int | None = None
    remote_isn: int = 0
    ts_map: dict[int, int] = field(default_factory=dict)
    first_ts: tuple[int, int] | None = None  #: (script TS val, live TS val)

    @property
    def local_offset(self) -> int:
        """script -> live for our sequence space in a SYN (local_seq_script_to_live_offset
        with is_syn): the script's ISN stands for the live one."""
        return 0 if self.live_local_isn is None else (
            self.live_local_isn - self.script_local_isn) & 0xFFFFFFFF

    def local_off(self, syn: bool) -> int:
        """local_seq_script_to_live_offset: in a SYN the script's ISN stands for the live
        one; in any other segment the script's numbers count from the live ISN."""
        if syn:
            return self.local_offset
        return 0 if self.live_local_isn is None else self.live_local_isn

    def remote_off(self, syn: bool) -> int:
        """remote_seq_script_to_live_offset: the peer's numbers are the script's own in a
        SYN, and count from the peer's ISN after it."""
        return 0 if syn else self.remote_isn


@dataclass
class Pending:
    event: s.Event
    spec: s.SyscallSpec
    started_ns: int


def apply_options(script: s.Script, config: Config) -> Config:
    for line, name, value in script.options:
        apply_option(config, line, name, value)
    return config


def apply_option(config: Config, line: int, name: str, value: str | None) -> None:
    def number(kind: type = int) -> Any:
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise DrillError(line, f"bad --{name}: {value}") from None

    if name == "tolerance_usecs":
        config.tolerance_usecs = number()
        if config.tolerance_usecs <= 0:
            raise DrillError(line, f"bad --tolerance_usecs: {value}")
    elif name == "tolerance_percent":
        config.tolerance_percent = number(float)
        if not 0 <= config.tolerance_percent <= 100:
            raise DrillError(line, f"bad --tolerance_percent: {value}")
    elif name == "mss":
        config.mss = number()
    elif name == "mtu":
        config.mtu = number()
    elif name == "strict_segments":
        config.strict_segments = True
    elif name == "tcp_ts_tick_usecs":
        config.tcp_ts_tick_usecs = number()
    elif name == "ip_version":
        wanted = {"ipv4": 4, "ipv6": 6}.get(value or "")
        if wanted is None:
            raise DrillUnsupported(line, f"--ip_version={value}")
        if wanted != config.family:
            raise DrillUnsupported(line, f"the script pins --ip_version={value}")
    elif name in ("local_ip", "remote_ip"):
        try:
            version = ipaddress.ip_address(value or "").version
        except ValueError:
            raise DrillError(line, f"bad --{name}: {value}") from None
        if version == config.family:
            setattr(config, name, value)
    elif name in ("bind_port", "connect_port"):
        setattr(config, name, number())
    elif name in ("define", "D"):
        key, _, val = (value or "").partition("=")
        config.defines[key] = val
    elif name in ("verbose", "gateway_ip", "netmask_ip", "speed", "dry_run", "non_fatal",
                  "send_omit_free", "so_filename", "so_flags", "tcp_ts_ecr_scaled",
                  "init_scripts", "debug"):
        return
    else:
        raise DrillUnsupported(line, f"option --{name}")


class Runner:
    def __init__(self, script: s.Script, config: Config, verbose: bool = False) -> None:
        self.script = script
        self.config = config
        self.verbose = verbose
        self.exchange: list[str] = []
        family = config.family
        defaults = KERNEL_RUNNER[family]
        self.local_ip = config.local_ip or str(defaults["local_ip"])
        self.remote_ip = config.remote_ip or str(defaults["remote_ip"])
        self.local = ipaddress.ip_address(self.local_ip).packed
        self.remote = ipaddress.ip_address(self.remote_ip).packed
        self.clock = VirtualClock()
        self.host = Host("drill", clock=self.clock, seed=1)
        mtu = config.mtu or int(defaults["mtu"])
        self.iface = self.host.add_interface(
            "tun0", mac=None, mtu=mtu,
            addresses=[f"{self.local_ip}/{defaults['prefix']}"], checksum_offload=False)
        self.iface.attach(self._capture)
        self.host.add_route(f"{self.remote_ip}/{32 if family == 4 else 128}", dev="tun0")
        self.outbound: list[fr.Frame] = []
        self.syscalls = Syscalls(self.host, 2 if family == 4 else 10, self.local_ip,
                                 self.remote_ip, config.bind_port, config.connect_port,
                                 self._on_socket_event)
        self.commands = Commands(self.host)
        #: names the script's code blocks assigned (``run_code``)
        self.code_names: dict[str, object] = {}
        self.syscalls.tolerance_usecs = config.tolerance_usecs
        self.sut: DrillSocket | None = None
        self.sockets: list[DrillSocket] = []
        self.pending: Pending | None = None
        self.deferred: DrillFailure | None = None
        self.start_ns = self.clock.now()
        self.syscalls.live_start_ns = self.start_ns
        self.event: s.Event | None = None
        self.last_event: s.Event | None = None
        self._next_port = 48000
        self._rx_errors = 0

    # -- time ----------------------------------------------------------------------------
    def now_usecs(self) -> int:
        return (self.clock.now() - self.start_ns) // 1000

    def _live_ns(self, usecs: int) -> int:
        return self.start_ns + usecs * 1000

    def _poll(self) -> None:
        self.host.poll()
        self._check_rx_errors()
        self._retry_pending()

    def _check_rx_errors(self) -> None:
        errors = self.host.counters.get("RcunetRxExceptions")
        if errors != self._rx_errors:
            self._rx_errors = errors
            line = self.event.line if self.event else 0
            raise DrillFailure(line, "rcunet raised an exception on its receive path "
                                     "(RcunetRxExceptions): a stack bug, not a script "
                                     "mismatch")

    def advance_to(self, until_ns: int, stop: Any = None) -> bool:
        """Run the Host until ``until_ns`` (or until ``stop()``); True if stopped."""
        guard = 0
        while True:
            self._poll()
            if stop is not None and stop():
                return True
            deadline = self.host.next_deadline()
            wake = self._pending_wake()
            if wake is not None and (deadline is None or wake < deadline):
                deadline = max(wake, self.clock.now())
            if deadline is None or deadline > until_ns:
                break
            if deadline > self.clock.now():
                self.clock.set(deadline)
                guard = 0
            else:
                guard += 1
                if guard > 10000:
                    raise DrillFailure(self.event.line if self.event else 0,
                                       "rcunet's timers do not make progress (a timer "
                                       "due now keeps re-arming itself for now)")
        if self.clock.now() < until_ns:
            self.clock.set(until_ns)
            self._poll()
            if stop is not None and stop():
                return True
        return False

    def _pending_wake(self) -> int | None:
        """When the blocking call in progress times out by itself (poll, epoll_wait)."""
        pending = self.pending
        wake_ms = self.syscalls.block_deadline_ms
        if pending is None or wake_ms is None:
            return None
        return pending.started_ns + wake_ms * 1_000_000

    def wait_for_event(self, event: s.Event) -> None:
        target = self._live_ns(event.time_usecs)
        if target > self.clock.now():
            self.advance_to(target)
        self._raise_deferred()

    def _raise_deferred(self) -> None:
        if self.deferred is not None:
            failure, self.deferred = self.deferred, None
            raise failure

    # -- capture -------------------------------------------------------------------------
    def _capture(self, packet: bytes) -> None:
        frame = fr.decode(bytes(packet), self.clock.now())
        if frame is None or frame.dst != self.remote:
            return
        self.outbound.append(frame)

    # -- the script ----------------------------------------------------------------------
    def run(self) -> None:
        script = self.script
        if script.init_command is not None:
            self._command(script.init_command.line, script.init_command.command)
        for event in script.events:
            self.last_event, self.event = self.event, event
            self._check_time_order(event)
            self.adjust_relative_event_time(event)
            action = event.action
            try:
                if isinstance(action, s.PacketSpec):
                    self.packet_event(event, action)
                elif isinstance(action, s.SyscallSpec):
                    self.syscall_event(event, action)
                elif isinstance(action, s.CommandSpec):
                    self.wait_for_event(event)
                    self._check_event_time(event, "command")
                    self._command(event.line, action.command)
                else:
                    self.wait_for_event(event)
                    self.code_event(event, action)
            except (DrillError, DrillFailure) as exc:
                if exc.line == 0:
                    exc.line = event.line
                    exc.args = (f"line {event.line}: {exc.message}",)
                raise
        self._finish()

    def _check_time_order(self, event: s.Event) -> None:
        last = self.event if self.last_event is None else self.last_event
        if last is None or last is event:
            return
        absolute = (s.TimeType.ABSOLUTE, s.TimeType.ABSOLUTE_RANGE)
        if last.time_type in absolute and event.time_type in absolute and \
                event.time_usecs < last.time_usecs:
            raise DrillError(event.line, f"time goes backward in script from "
                                         f"{last.time_usecs} usec to {event.time_usecs} usec")

    def adjust_relative_event_time(self, event: s.Event) -> None:
        if event.time_type not in (s.TimeType.ANY, s.TimeType.RELATIVE,
                                   s.TimeType.RELATIVE_RANGE):
            return
        last = self.last_event
        if last is not None and _anchored(last) and _anchored(event):
            offset = last.time_usecs
        else:
            offset = self.now_usecs()
        event.offset_usecs = offset
        event.time_usecs += offset
        event.time_end_usecs += offset
        action = event.action
        if event.time_type is s.TimeType.RELATIVE and isinstance(action, s.SyscallSpec) \
                and action.end_usecs is not None:
            action.end_usecs += offset

    def verify_time(self, event: s.Event, actual_usecs: int, what: str,
                    script_usecs: int | None = None, last_usecs: int | None = None) -> None:
        time_type = event.time_type
        if time_type is s.TimeType.ANY:
            return
        expected = event.time_usecs if script_usecs is None else script_usecs
        tolerance = self.config.tolerance_usecs
        if last_usecs is None and self.last_event is not None:
            last_usecs = self.last_event.time_usecs
        if last_usecs is not None:
            dynamic = int(self.config.tolerance_percent / 100.0 * (expected - last_usecs))
            tolerance = max(tolerance, dynamic)
        if script_usecs is None and time_type in (s.TimeType.ABSOLUTE_RANGE,
                                                  s.TimeType.RELATIVE_RANGE):
            end = event.time_end_usecs
            if actual_usecs < expected - tolerance or actual_usecs > end + tolerance:
                base = event.offset_usecs if time_type is s.TimeType.RELATIVE_RANGE else 0
                sign = "+" if base else ""
                raise DrillFailure(event.line, (
                    f"timing error: expected {what} in time range {sign}"
                    f"{(expected - base) / 1e6:.6f}~{sign}{(end - base) / 1e6:.6f} sec but "
                    f"happened at {sign}{(actual_usecs - base) / 1e6:.6f} sec"), actual_usecs)
            return
        if abs(actual_usecs - expected) > tolerance:
            raise DrillFailure(event.line, (
                f"timing error: expected {what} at {expected / 1e6:.6f} sec but happened at "
                f"{actual_usecs / 1e6:.6f} sec; tolerance {tolerance / 1e6:.6f} sec"),
                actual_usecs)

    def _check_event_time(self, event: s.Event, what: str) -> None:
        self.verify_time(event, self.now_usecs(), what)

    def _finish(self) -> None:
        if self.pending is not None:
            pending = self.pending
            self.advance_to(self.clock.now() + AWAIT_IDLE_USECS * 1000,
                            stop=lambda: self.pending is None)
            self._raise_deferred()
            if self.pending is not None:
                raise DrillFailure(pending.event.line, "runtime error: exiting while a "
                                                       "blocking system call is in progress")
        if self.script.cleanup_command is not None:
            self._command(self.script.cleanup_command.line, self.script.cleanup_command.command)

    def _command(self, line: int, command: str) -> None:
        status = self.commands.run(line, command)
        if status:
            raise DrillFailure(line, f"error executing `{command.strip()}` command: "
                                     f"non-zero status {status}")

    # -- code ----------------------------------------------------------------------------
    def code_event(self, event: s.Event, code: s.CodeSpec) -> None:
        sk = self._sut_sock()
        values = snapshot(sk, self.clock.now()) if sk is not None else {}
        if sk is not None:  # packetdrill's code.c adds getsockopt(SO_MEMINFO) by name
            values.update(meminfo.snapshot(sk))
        try:
            run_code(event.line, code.text, values, self.code_names)
        except CodeFailure as exc:
            raise DrillFailure(event.line, f"error executing code: {exc}  (values: "
                                           f"{_brief(values, code.text)})",
                               self.now_usecs()) from None

    def _sut_sock(self) -> Any:
        sut = self.sut
        if sut is None:
            return None
        if sut.fd is not None:
            return sut.fd.sk
        for sk in list(self.host.tcp.sockets):
            if getattr(sk, "lport", None) == sut.local_port and \
                    getattr(sk, "fport", None) == sut.remote_port:
                return sk
        return None

    # -- system calls --------------------------------------------------------------------
    def _on_socket_event(self, kind: str, fd: Fd | None, child: Any) -> None:
        if kind == "socket":
            sock = DrillSocket(fd=fd)
            self.sockets.append(sock)
            self.sut = sock
        elif kind == "listen":
            sock = self._socket_of(fd)
            if sock is not None:
                sock.state = "listening"
                sock.local_port = fd.sk.lport if fd is not None else self.config.bind_port
        elif kind == "connect":
            sock = self._socket_of(fd)
            if sock is not None:
                sock.state = "connecting"
                sock.remote_port = self.config.connect_port
                # a new connection (also of a socket connect(AF_UNSPEC) disconnected):
                # its ISNs and timestamps are learnt anew
                sock.live_local_isn, sock.remote_isn = None, 0
                sock.ts_map, sock.first_ts = {}, None
                self.sut = sock
        elif kind == "accept" and child is not None:
            for sock in self.sockets:
                if sock.fd is None and sock.remote_port == child.fport:
                    sock.fd = fd
                    break

    def _socket_of(self, fd: Fd | None) -> DrillSocket | None:
        for sock in self.sockets:
            if sock.fd is fd:
                return sock
        return None

    def syscall_event(self, event: s.Event, spec: s.SyscallSpec) -> None:
        self.wait_for_event(event)
        if spec.end_usecs is not None or self.pending is not None:
            # await_idle_thread: a call waits for the blocking call before it
            if self.pending is not None:
                self.advance_to(self.clock.now() + AWAIT_IDLE_USECS * 1000,
                                stop=lambda: self.pending is None)
                self._raise_deferred()
                if self.pending is not None:
                    raise DrillFailure(event.line, "blocking system call while another "
                                                   "blocking system call is already in "
                                                   "progress")
        self._check_event_time(event, "system call start")
        outcome = self._invoke(event, spec)
        if outcome is BLOCKED:
            if spec.end_usecs is not None:
                self.pending = Pending(event, spec, self.clock.now())
                return
            outcome = self._block(event, spec)
        assert isinstance(outcome, Outcome)
        self._log(f"{self.now_usecs() / 1e6:9.6f} {spec.name}() = {outcome.result}"
                  + (f" {errno_name(outcome.errno)}" if outcome.result < 0 else ""))
        if spec.end_usecs is not None:
            self.verify_time(event, self.now_usecs(), "system call return",
                             script_usecs=spec.end_usecs, last_usecs=event.time_usecs)
        self._check_outcome(event, spec, outcome)

    def _invoke(self, event: s.Event, spec: s.SyscallSpec, resume: bool = False
                ) -> Outcome | object:
        calls = self.syscalls
        if isinstance(spec.result, int) and spec.result >= 0 and spec.name in (
                "socket", "accept", "accept4", "epoll_create", "epoll_create1"):
            calls.wanted_fd = spec.result
        try:
            return calls.resume(spec) if resume else calls.call(spec)
        except (DrillError, DrillFailure):
            raise
        except Exception as exc:  # noqa: BLE001 - a stack bug: evidence, not a traceback
            raise DrillFailure(event.line, f"rcunet raised {type(exc).__name__}: {exc} in "
                                           f"{spec.name}()", self.now_usecs()) from None
        finally:
            calls.wanted_fd = None

    def _block(self, event: s.Event, spec: s.SyscallSpec) -> Outcome:
        """A blocking call without an end time: the script waits for it (run_syscall
        in the main thread)."""
        box: list[Outcome] = []
        start = self.clock.now()
        calls = self.syscalls

        def done() -> bool:
            calls.elapsed_ms = (self.clock.now() - start) // 1_000_000
            result = self._invoke(event, spec, resume=True)
            if result is BLOCKED:
                return False
            box.append(result)  # type: ignore[arg-type]
            return True

        limit = start + BLOCK_LIMIT_USECS * 1000
        while not box:
            wake = calls.block_deadline_ms
            until = limit if wake is None else min(limit, start + wake * 1_000_000)
            if self.advance_to(until, stop=done) or box:
                break
            if self.clock.now() >= limit:
                raise DrillFailure(event.line, f"{spec.name}() blocked and nothing "
                                               "unblocked it", self.now_usecs())
            if wake is not None:
                done()
        calls.elapsed_ms = 0
        return box[0]

    def _retry_pending(self) -> None:
        pending = self.pending
        if pending is None or self.deferred is not None:
            return
        self.syscalls.elapsed_ms = (self.clock.now() - pending.started_ns) // 1_000_000
        try:
            outcome = self._invoke(pending.event, pending.spec, resume=True)
        except (DrillError, DrillFailure) as exc:
            self.pending = None
            self.deferred = exc if isinstance(exc, DrillFailure) else DrillFailure(
                pending.event.line, exc.message)
            return
        if outcome is BLOCKED:
            return
        self.pending = None
        assert isinstance(outcome, Outcome)
        try:
            self.verify_time(pending.event, self.now_usecs(), "system call return",
                             script_usecs=pending.spec.end_usecs,
                             last_usecs=pending.event.time_usecs)
            self._check_outcome(pending.event, pending.spec, outcome)
        except DrillFailure as exc:
            self.deferred = exc

    def _check_outcome(self, event: s.Event, spec: s.SyscallSpec, outcome: Outcome) -> None:
        if spec.result is s.ELLIPSIS:
            return
        try:
            expected = self.syscalls.int_value(spec.result)
        except DrillError as exc:
            raise DrillError(event.line, exc.message) from None
        got = outcome.result
        where = f"runtime error in {spec.name} call"
        if expected == -1 or got == -1:
            if got != expected:
                detail = (f"with errno {outcome.errno} ({errno_name(outcome.errno)})"
                          if got == -1 else "with errno 0 (Success)")
                raise DrillFailure(event.line, f"{where}: Expected result {expected} but "
                                               f"got {got} {detail}", self.now_usecs())
            # by value, as packetdrill compares them: EOPNOTSUPP is ENOTSUP, EAGAIN is
            # EWOULDBLOCK on Linux
            if spec.errno is not None and errno_name(outcome.errno) != spec.errno and \
                    ERRNO_NAMES.get(spec.errno) != outcome.errno:
                raise DrillFailure(event.line, f"{where}: Expected errno {spec.errno} but "
                                               f"got {errno_name(outcome.errno)}",
                                   self.now_usecs())
        elif spec.name in ("socket", "accept", "accept4") and expected >= 0:
            pass  # CHECK_FD: any descriptor (the table maps the script's number)
        elif got != expected:
            raise DrillFailure(event.line, f"{where}: Expected result {expected} but got "
                                           f"{got} with errno 0 (Success)", self.now_usecs())
        if outcome.problems:
            raise DrillFailure(event.line, f"{where}: {outcome.problems[0]}",
                               self.now_usecs())

    # -- packets -------------------------------------------------------------------------
    def packet_event(self, event: s.Event, spec: s.PacketSpec) -> None:
        if spec.protocol == "udp":
            raise DrillUnsupported(event.line, "UDP packets (rcunet drill runs TCP scripts)")
        sock = self._socket_for(event, spec)
        if spec.direction == "<":
            self.wait_for_event(event)
            self._check_event_time(event, "inbound packet")
            self.inject(event, spec, sock)
        else:
            self.expect(event, spec, sock)
        self._raise_deferred()

    def _socket_for(self, event: s.Event, spec: s.PacketSpec) -> DrillSocket:
        sut = self.sut
        if spec.protocol == "tcp":
            syn = "S" in spec.flags
            ack = "." in spec.flags
            if spec.direction == "<" and syn and not ack and (
                    sut is None or sut.state == "listening"):
                child = DrillSocket(state="passive_rcvd",
                                    local_port=sut.local_port if sut else
                                    self.config.bind_port,
                                    remote_port=self._ephemeral(), remote_isn=spec.seq)
                self.sockets.append(child)
                self.sut = child
                return child
            if spec.direction == ">" and syn and not ack and sut is not None and \
                    sut.state == "connecting":
                sut.state = "syn_sent"
                sut.script_local_isn = spec.seq
                return sut
        if sut is None:
            raise DrillFailure(event.line, "no matching socket for script packet")
        return sut

    def _ephemeral(self) -> int:
        self._next_port += 1
        return self._next_port

    def inject(self, event: s.Event, spec: s.PacketSpec, sock: DrillSocket) -> None:
        if spec.protocol == "icmp":
            packet = self._icmp_packet(event, spec, sock)
            self._log(f"{self.now_usecs() / 1e6:9.6f} < icmp {spec.icmp_type} "
                      f"{spec.icmp_code}")
            self.host.receive(self.iface, packet)
            self._poll()
            return
        if "S" in spec.flags and "." in spec.flags and sock.state == "syn_sent":
            sock.remote_isn = spec.seq
            sock.state = "syn_acked"
        elif sock.state == "synack_sent" and "." in spec.flags:
            sock.state = "synack_acked"
        syn = "S" in spec.flags
        offset = sock.local_off(syn)
        seq_base = sock.remote_off(syn)
        ack = spec.ack or 0
        if "." in spec.flags:
            ack = (ack + offset) & 0xFFFFFFFF
        options = self._inbound_options(event, spec, sock, offset)
        flags = fr.flag_bits(spec.flags)
        if spec.ace is not None:  # ".5": the ACE field (AE, CWR, ECE) holds 5
            flags = (flags & ~0x1C0) | (spec.ace & 7) << 6
        sport = spec.src_port or sock.remote_port
        dport = spec.dst_port or sock.local_port
        # One packet, whatever its size: packetdrill injects it whole (with --mss as one
        # GSO packet, which the kernel's TCP receives as one skb).
        pieces = [(0, spec.payload)]
        for index, (start, length) in enumerate(pieces):
            last = index == len(pieces) - 1
            piece_flags = flags if last else flags & ~0x09  # FIN and PSH on the last one
            l4 = fr.tcp_segment(self.remote, self.local, sport, dport,
                                (spec.seq + seq_base + start) & 0xFFFFFFFF, ack, piece_flags,
                                spec.win or 0, options, bytes(length), spec.urg)
            key = self.syscalls.md5_key() if any(
                o.kind == "md5" for o in spec.options or ()) else None
            if key is not None:  # the script's md5 option, signed as the peer would
                l4 = fr.sign_segment(l4, self.remote, self.local, key)
            packet = fr.ip_packet(self.remote, self.local, fr.PROTO_TCP, l4,
                                  ecn=fr.ECN_BITS.get(spec.ecn or "noecn", 0), tos=spec.tos,
                                  ttl=spec.ttl if spec.ttl is not None else 64,
                                  flowlabel=spec.flowlabel or 0)
            decoded = fr.decode(packet) if self.verbose else None
            if decoded is not None:
                self._log(f"{self.now_usecs() / 1e6:9.6f} < "
                          f"{fr.frame_text(decoded, 0, offset)}")
            self.host.receive(self.iface, packet)
        self._poll()

    def _inbound_options(self, event: s.Event, spec: s.PacketSpec, sock: DrillSocket,
                         offset: int) -> bytes:
        raw: list[fr.RawOption] = []
        for opt in spec.options or ():
            kind = opt.kind
            if kind == "nop":
                raw.append(fr.RawOption(fr.OPT_NOP))
            elif kind == "eol":
                raw.append(fr.RawOption(fr.OPT_EOL))
            elif kind == "mss":
                raw.append(fr.RawOption(fr.OPT_MSS, struct.pack("!H", opt.values[0])))
            elif kind == "wscale":
                raw.append(fr.RawOption(fr.OPT_WS, bytes((opt.values[0],))))
            elif kind == "sackOK":
                raw.append(fr.RawOption(fr.OPT_SACKOK))
            elif kind == "sack":
                raw.append(fr.RawOption(fr.OPT_SACK, b"".join(
                    struct.pack("!II", (a + offset) & 0xFFFFFFFF, (b + offset) & 0xFFFFFFFF)
                    for a, b in opt.values)))
            elif kind == "TS":
                val, ecr = opt.values
                if "." in spec.flags:
                    ecr = self._live_ecr(event, sock, ecr)
                raw.append(fr.RawOption(fr.OPT_TS, struct.pack("!II", val, ecr)))
            elif kind in ("FO", "FOEXP"):
                cookie = self._cookie(event.line, opt.values[0])
                if kind == "FO":
                    raw.append(fr.RawOption(fr.OPT_FO, cookie))
                else:
                    raw.append(fr.RawOption(fr.OPT_EXP, struct.pack("!H", fr.FO_MAGIC)
                                            + cookie))
            elif kind == "md5":
                raw.append(fr.RawOption(fr.OPT_MD5, self._md5_bytes(event.line, opt)))
            elif kind == "accecn":
                raw.append(self._accecn(event.line, opt))
        encoded = fr.build_options(raw)
        if len(encoded) > 40:
            raise DrillError(event.line, f"TCP options too long ({len(encoded)} bytes)")
        return encoded

    @staticmethod
    def _accecn(line: int, opt: s.TcpOption) -> fr.RawOption:
        try:
            return fr.accecn_option(opt.values)
        except ValueError as exc:
            raise DrillError(line, str(exc)) from None

    def _live_ecr(self, event: s.Event, sock: DrillSocket, ecr: int) -> int:
        if ecr in sock.ts_map:
            return sock.ts_map[ecr]
        if sock.first_ts is not None:
            script_val, live_val = sock.first_ts
            return (ecr - script_val + live_val) & 0xFFFFFFFF
        if ecr == 0:
            return 0
        raise DrillError(event.line, f"unable to infer live TS ecr for script TS ecr {ecr}; "
                                     "no matching or preceding outbound TS val")

    def _icmp_packet(self, event: s.Event, spec: s.PacketSpec, sock: DrillSocket) -> bytes:
        family = self.config.family
        code_name = self.config.defines.get(spec.icmp_code, spec.icmp_code)
        if spec.icmp_type not in _ICMP4 or code_name not in _ICMP4_CODES:
            raise DrillUnsupported(event.line, f"ICMP {spec.icmp_type} {code_name}")
        # the quoted segment's seq counts from our ISN; packetdrill quotes seq 0 (the
        # ISN) when the line gives no segment
        echoed_seq = sock.local_off(False)
        if spec.echoed is not None and spec.echoed[0] == "tcp":
            echoed_seq = (spec.echoed[1] + sock.local_off(False)) & 0xFFFFFFFF
        quoted_l4 = struct.pack("!HHI", sock.local_port, sock.remote_port, echoed_seq)
        inner = fr.ip_packet(self.local, self.remote, fr.PROTO_TCP,
                             quoted_l4 + bytes(12))[:(20 if family == 4 else 40) + 8]
        if family == 4:
            itype, code = _ICMP4[spec.icmp_type], _ICMP4_CODES[code_name]
            rest = spec.icmp_mtu or 0 if code_name == "frag_needed" else 0
            body = fr.icmp_message(self.remote, self.local, itype, code, rest & 0xFFFF,
                                   inner)
            return fr.ip_packet(self.remote, self.local, fr.PROTO_ICMP, body)
        if code_name == "frag_needed":
            itype, code, rest = 2, 0, spec.icmp_mtu or 1280
        elif spec.icmp_type == "time_exceeded":
            itype, code, rest = 3, 0, 0
        elif spec.icmp_type == "parameter_problem":
            itype, code, rest = 4, 0, 0  # erroneous header field, pointer 0
        else:
            itype, rest = 1, 0
            code = {"port_unreachable": 4, "host_unreachable": 3, "net_unreachable": 0,
                    "protocol_unreachable": 4, "net_prohibited": 1,
                    "host_prohibited": 1}.get(code_name, 0)
        body = fr.icmp_message(self.remote, self.local, itype, code, rest, inner)
        return fr.ip_packet(self.remote, self.local, fr.PROTO_ICMPV6, body)

    # -- outbound ------------------------------------------------------------------------
    def _sniff(self, event: s.Event, sock: DrillSocket) -> fr.Frame:
        if event.time_type is s.TimeType.ANY:
            limit = self.clock.now() + BLOCK_LIMIT_USECS * 1000
        else:
            base = self.last_event.time_usecs if self.last_event else 0
            wait = max(event.time_usecs, event.time_end_usecs) - base
            limit = self._live_ns(base + max(0, wait) + SNIFF_SLACK_USECS)
        while True:
            while self.outbound:
                frame = self.outbound.pop(0)
                if self._frame_matches(sock, frame):
                    return frame
            if self.clock.now() >= limit:
                raise DrillFailure(event.line, "timed out waiting for packet",
                                   self.now_usecs())
            self.advance_to(limit, stop=lambda: bool(self.outbound))
            self._raise_deferred()

    def _frame_matches(self, sock: DrillSocket, frame: fr.Frame) -> bool:
        if frame.protocol in (fr.PROTO_ICMP, fr.PROTO_ICMPV6):
            return True
        if frame.protocol != fr.PROTO_TCP:
            return False
        if sock.state == "syn_sent" and sock.live_local_isn is None:
            if frame.flags & 0x12 == 0x02 and frame.dport == sock.remote_port:
                sock.local_port = frame.sport
                sock.live_local_isn = frame.seq
                return True
            return False
        return frame.sport == sock.local_port and frame.dport == sock.remote_port

    def expect(self, event: s.Event, spec: s.PacketSpec, sock: DrillSocket) -> None:
        if spec.protocol == "tcp" and sock.state == "passive_rcvd" and \
                "S" in spec.flags and "." in spec.flags:
            sock.script_local_isn = spec.seq
        frames = [self._sniff(event, sock)]
        first = frames[0]
        if spec.protocol == "tcp" and first.protocol == fr.PROTO_TCP:
            if sock.state == "passive_rcvd" and "S" in spec.flags and "." in spec.flags:
                sock.state = "synack_sent"
                sock.live_local_isn = first.seq
            total = len(first.payload)
            while total < spec.payload and not self.config.strict_segments:
                nxt = self._sniff(event, sock)
                prev = frames[-1]
                if nxt.protocol != fr.PROTO_TCP or nxt.seq != (prev.seq + len(
                        prev.payload)) & 0xFFFFFFFF or (len(nxt.payload) < spec.payload - total
                                                        and len(nxt.payload) != len(
                                                            prev.payload)):
                    frames.append(nxt)
                    break
                frames.append(nxt)
                total += len(nxt.payload)
        self._log_frames(frames, sock)
        try:
            if spec.protocol == "icmp":
                self._verify_icmp(event, spec, first)
            else:
                self._verify_tcp(event, spec, sock, frames)
            self.verify_time(event, (frames[-1].time_ns - self.start_ns) // 1000,
                             "outbound packet")
        except DrillFailure as exc:
            actual = self._actual_text(frames, sock)
            exc.message += f"\n  script packet: {self._script_text(event, spec)}" \
                           f"\n  actual packet: {actual}"
            exc.args = (f"line {exc.line}: {exc.message}",)
            exc.at_usecs = (first.time_ns - self.start_ns) // 1000
            raise

    def _verify_icmp(self, event: s.Event, spec: s.PacketSpec, frame: fr.Frame) -> None:
        if frame.protocol not in (fr.PROTO_ICMP, fr.PROTO_ICMPV6):
            raise DrillFailure(event.line, "error handling packet: expected an ICMP packet")

    def _verify_tcp(self, event: s.Event, spec: s.PacketSpec, sock: DrillSocket,
                    frames: list[fr.Frame]) -> None:
        first, last = frames[0], frames[-1]
        line = event.line
        if first.protocol != fr.PROTO_TCP:
            raise DrillFailure(line, "error handling packet: expected a TCP packet")
        payload = sum(len(f.payload) for f in frames)
        if payload != spec.payload:
            raise DrillFailure(line, f"error handling packet: live packet payload: expected "
                                     f"{spec.payload} bytes vs actual {payload} bytes")
        # aggregate_packets: the last segment's headers, the first one's seq and CWR
        flags = (last.flags & ~0x80) | (first.flags & 0x80)
        syn = bool(first.flags & 0x02)
        offset = sock.local_off(syn)
        script_flags = fr.flag_bits(spec.flags)
        seq = (first.seq - offset) & 0xFFFFFFFF
        ack = (last.ack - sock.remote_off(syn)) & 0xFFFFFFFF if last.flags & 0x10 else last.ack
        self._check_ip(event, spec, last)
        script_opts = self._script_option_bytes(spec)
        if spec.options is not None:
            got_doff = 5 + (len(fr.build_options(last.options)) + 3) // 4
            want_doff = 5 + (len(script_opts) + 3) // 4
            _check(line, "tcp_data_offset", want_doff, got_doff)
        if spec.ace is not None:  # ".6": the ACE field as one 3-bit number
            _check(line, "tcp_ace", spec.ace, (flags >> 6) & 7)
        for name, bit in _TCP_FLAG_FIELDS:
            if spec.ace is not None and name in ("tcp_ece", "tcp_cwr", "tcp_ae"):
                continue
            _check(line, name, 1 if script_flags & bit else 0, 1 if flags & bit else 0)
        _check(line, "tcp_seq", spec.seq, seq)
        _check(line, "tcp_ack_seq", spec.ack or 0, ack)
        if spec.win is not None:
            _check(line, "tcp_window", spec.win, last.win)
        _check(line, "tcp_urg_ptr", spec.urg, last.urg)
        self._verify_options(event, spec, sock, last)

    def _check_ip(self, event: s.Event, spec: s.PacketSpec, frame: fr.Frame) -> None:
        if spec.ecn is not None:
            if spec.ecn == "ect01":
                if frame.ecn not in (1, 2):
                    raise DrillFailure(event.line, f"live packet field ip_ecn: expected ECT0 "
                                                   f"or ECT1 vs actual "
                                                   f"{fr.ECN_NAMES[frame.ecn]}")
            else:
                _check(event.line, "ip_ecn", fr.ECN_BITS[spec.ecn], frame.ecn)
        if spec.tos is not None:
            _check(event.line, "ip_tos", spec.tos, frame.tos)
        if spec.ttl is not None:
            _check(event.line, "ip_ttl", spec.ttl, frame.ttl)
        if spec.flowlabel is not None and self.config.family == 6:
            _check(event.line, "ipv6_flow_label", spec.flowlabel, frame.flowlabel)

    def _script_option_bytes(self, spec: s.PacketSpec) -> bytes:
        out = bytearray()
        for opt in spec.options or ():
            size = {"nop": 1, "eol": 1, "mss": 4, "wscale": 3, "sackOK": 2, "TS": 10,
                    "md5": 18}.get(opt.kind)
            if size is None:
                if opt.kind == "sack":
                    size = 2 + 8 * len(opt.values)
                elif opt.kind == "accecn":
                    size = 2 + 3 * len(opt.values)
                elif opt.kind == "FO":
                    size = 2 + len(str(opt.values[0])) // 2
                else:
                    size = 4 + len(str(opt.values[0])) // 2
            out += bytes(size)
        return bytes(out)

    def _verify_options(self, event: s.Event, spec: s.PacketSpec, sock: DrillSocket,
                        frame: fr.Frame) -> None:
        actual = frame.options
        ts = frame.ts
        script_ts = next((o for o in spec.options or () if o.kind == "TS"), None)
        if ts is not None and script_ts is not None:
            script_val = int(script_ts.values[0])
            sock.ts_map[script_val] = ts[0]
            if sock.first_ts is None:
                sock.first_ts = (script_val, ts[0])
        if spec.options is None:
            return
        script = list(spec.options)
        # trailing EOL padding of the actual list is not an option the script lists
        while actual and actual[-1].kind == fr.OPT_EOL and (not script or script[-1].kind
                                                             != "eol"):
            actual = actual[:-1]
        if len(actual) != len(script):
            raise DrillFailure(event.line, "bad outbound TCP options")
        kinds = {"nop": fr.OPT_NOP, "eol": fr.OPT_EOL, "mss": fr.OPT_MSS,
                 "wscale": fr.OPT_WS, "sackOK": fr.OPT_SACKOK, "sack": fr.OPT_SACK,
                 "TS": fr.OPT_TS, "md5": fr.OPT_MD5, "FO": fr.OPT_FO, "FOEXP": fr.OPT_EXP}
        for want, got in zip(script, actual, strict=True):
            if want.kind == "accecn":
                expected_option = self._accecn(event.line, want)
                if got.kind != expected_option.kind:
                    raise DrillFailure(event.line, "bad outbound TCP options")
            elif kinds.get(want.kind) != got.kind:
                raise DrillFailure(event.line, "bad outbound TCP options")
            expected = self._expected_option_data(want, sock)
            if want.kind == "TS":
                tick = self.config.tcp_ts_tick_usecs
                if tick and sock.first_ts is not None:
                    live_val = struct.unpack("!I", got.data[:4])[0]
                    script_space = (sock.first_ts[0] + live_val - sock.first_ts[1]) \
                        & 0xFFFFFFFF
                    delta = abs(((script_space - int(want.values[0]) + 0x80000000)
                                 & 0xFFFFFFFF) - 0x80000000)
                    tolerance = max(self.config.tolerance_usecs, int(
                        self.config.tolerance_percent / 100.0 * event.time_usecs))
                    if delta * tick > tolerance:
                        raise DrillFailure(event.line, "bad outbound TCP timestamp value, "
                                                       f"tolerance {tolerance}")
                continue
            if want.kind == "md5":
                self._verify_md5(event, frame, got)
                continue
            if expected is not None and expected != got.data:
                err = "bad length" if len(expected) != len(got.data) else "bad value"
                raise DrillFailure(event.line, (
                    f"{err} in outbound TCP option (kind={got.kind}): expected: "
                    f"{fr.option_text(fr.RawOption(got.kind, expected))} actual: "
                    f"{fr.option_text(got)}"
                ))

    @staticmethod
    def _md5_bytes(line: int, opt: s.TcpOption) -> bytes:
        """The digest a script writes (hex), cut or zero-padded to 16 bytes; the runner
        replaces it with the real one when a socket of the script holds a key."""
        try:
            data = bytes.fromhex(str(opt.values[0]))
        except ValueError:
            raise DrillError(line, f"bad md5 digest {opt.values[0]}") from None
        return (data + bytes(16))[:16]

    def _verify_md5(self, event: s.Event, frame: fr.Frame, got: fr.RawOption) -> None:
        """An outbound MD5 option must carry the digest of the segment under the key a
        socket of the script holds for the remote end (when one does)."""
        key = self.syscalls.md5_key()
        if key is None:
            return
        expected = tcp_md5.digest_raw(frame.segment, frame.src, frame.dst, key)
        if got.data != expected:
            raise DrillFailure(event.line, "bad value in outbound TCP option (kind=19): "
                                           f"MD5 digest {got.data.hex()}, expected "
                                           f"{expected.hex()}")

    def _expected_option_data(self, opt: s.TcpOption, sock: DrillSocket) -> bytes | None:
        kind = opt.kind
        if kind in ("nop", "eol", "sackOK"):
            return b""
        if kind == "mss":
            return struct.pack("!H", opt.values[0])
        if kind == "wscale":
            return bytes((opt.values[0],))
        if kind == "sack":
            # SACK blocks are in the remote's sequence space, counted from its ISN
            base = sock.remote_off(False)
            return b"".join(struct.pack("!II", (a + base) & 0xFFFFFFFF,
                                        (b + base) & 0xFFFFFFFF) for a, b in opt.values)
        if kind in ("FO", "FOEXP"):
            cookie = self._cookie(0, opt.values[0])
            return cookie if kind == "FO" else struct.pack("!H", fr.FO_MAGIC) + cookie
        if kind == "accecn":
            return self._accecn(0, opt).data
        return None

    def _cookie(self, line: int, value: object) -> bytes:
        """A Fast Open cookie written in hex, or the name of a -D definition of one
        (TFO_COOKIE), as packetdrill's parser resolves it."""
        text = str(value) if value else ""
        text = self.config.defines.get(text, text)
        try:
            return bytes.fromhex(text)
        except ValueError:
            raise DrillError(line, f"bad Fast Open cookie {value}") from None

    # -- printing ------------------------------------------------------------------------
    def _actual_text(self, frames: list[fr.Frame], sock: DrillSocket) -> str:
        first = frames[0]
        ts_base = 0 if sock.first_ts is None else (sock.first_ts[1] - sock.first_ts[0]) \
            & 0xFFFFFFFF
        text = fr.frame_text(first, sock.local_offset, 0, ts_base,
                             (first.time_ns - self.start_ns) // 1000)
        if len(frames) > 1:
            text += f"  (+{len(frames) - 1} more segment(s), " \
                    f"{sum(len(f.payload) for f in frames)} bytes in all)"
        return text

    def _script_text(self, event: s.Event, spec: s.PacketSpec) -> str:
        if spec.protocol != "tcp":
            return f"{event.time_usecs / 1e6:9.6f} {spec.protocol} {spec.icmp_type}"
        opts = ""
        if spec.options is None:
            opts = " <...>"
        elif spec.options:
            parts = []
            for o in spec.options:
                if o.kind == "TS":
                    parts.append(f"TS val {o.values[0]} ecr {o.values[1]}")
                elif o.kind == "sack":
                    parts.append("sack " + " ".join(f"{a}:{b}" for a, b in o.values))
                else:
                    parts.append(" ".join([o.kind, *map(str, o.values)]))
            opts = " <" + ",".join(parts) + ">"
        ack = f" ack {spec.ack}" if spec.ack is not None else ""
        win = f" win {spec.win}" if spec.win is not None else ""
        return (f"{event.time_usecs / 1e6:9.6f} {spec.flags or '-'} {spec.seq}:{spec.end_seq}"
                f"({spec.payload}){ack}{win}{opts}")

    def _log_frames(self, frames: list[fr.Frame], sock: DrillSocket) -> None:
        if self.verbose:
            for frame in frames:
                self._log("> " + fr.frame_text(frame, sock.local_offset, 0, 0,
                                               (frame.time_ns - self.start_ns) // 1000))

    def _log(self, text: str) -> None:
        if self.verbose:
            self.exchange.append(text)


def _anchored(event: s.Event) -> bool:
    action = event.action
    return isinstance(action, s.PacketSpec) and action.direction == "<"


def _check(line: int, name: str, expected: int, actual: int) -> None:
    if expected != actual:
        raise DrillFailure(line, f"error handling packet: live packet field {name}: "
                                 f"expected: {expected} ({expected:#x}) vs actual: {actual} "
                                 f"({actual:#x})")


def _brief(values: dict[str, int], text: str) -> str:
    used = [name for name in values if name in text]
    return ", ".join(f"{name}={values[name]}" for name in used) or "none"


def run_script(script: s.Script, family: int, verbose: bool = False) -> Result:
    """Run ``script`` in one family; never raises for anything the script contains."""
    result = Result(script.path, family, "pass")
    runner: Runner | None = None
    script = copy.deepcopy(script)  # the runner anchors relative times in place
    try:
        config = apply_options(script, Config(family=family,
                                              defines=dict(RUNNER_DEFINES[family])))
        runner = Runner(script, config, verbose)
        runner.run()
    except DrillUnsupported as exc:
        result.status, result.line, result.message = "unsupported", exc.line, exc.message
    except DrillError as exc:
        result.status, result.line, result.message = "error", exc.line, exc.message
    except DrillFailure as exc:
        result.status, result.line, result.message = "fail", exc.line, exc.message
    except RecursionError:
        result.status, result.message = "error", "script nesting too deep"
    finally:
        if runner is not None:
            result.exchange = runner.exchange
            try:
                runner.host.close()
            except Exception as exc:  # noqa: BLE001 - report, keep running the corpus
                if result.status == "pass":
                    result.status = "fail"
                    result.message = f"rcunet raised {type(exc).__name__} closing the Host: {exc}"
    return result
