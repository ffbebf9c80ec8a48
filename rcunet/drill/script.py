"""A parsed script: options, then events in file order (packetdrill's ``struct script``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class TimeType(enum.Enum):
    ABSOLUTE = "absolute"  #: 0.100
    RELATIVE = "relative"  #: +0.100
    ANY = "any"  #: *
    ABSOLUTE_RANGE = "absolute range"  #: 0.1~0.2
    RELATIVE_RANGE = "relative range"  #: +0.1~+0.2


# -- expressions (system call arguments and results) --------------------------------------
@dataclass(frozen=True, slots=True)
class Ellipsis_:
    """``...``: any value (an argument the engine fills in, or a result not checked).
    One instance (``ELLIPSIS``), compared by identity, copies included."""

    def __copy__(self) -> Ellipsis_:
        return ELLIPSIS

    def __deepcopy__(self, memo: dict[int, object]) -> Ellipsis_:
        return ELLIPSIS


ELLIPSIS = Ellipsis_()


@dataclass(frozen=True, slots=True)
class Symbol:
    name: str  #: SOCK_STREAM, O_NONBLOCK, ...: resolved by the system call layer


@dataclass(frozen=True, slots=True)
class Call:
    name: str  #: htons, inet_addr, inet6_addr, msg_name(...), msg_iov(1) ...
    args: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class BinOr:
    left: Any
    right: Any


@dataclass(frozen=True, slots=True)
class Assign:
    name: str  #: ``name = value`` inside a {...} structure or an argument list
    args: tuple[Any, ...] | None  #: msg_iov(1)=...: the parenthesised part
    value: Any


@dataclass(frozen=True, slots=True)
class Struct:
    items: tuple[Any, ...]  #: Assign items and bare expressions in order

    def field(self, name: str, default: Any = None) -> Any:
        for item in self.items:
            if isinstance(item, Assign) and item.name == name:
                return item.value
        return default

    def field_args(self, name: str) -> tuple[Any, ...] | None:
        for item in self.items:
            if isinstance(item, Assign) and item.name == name:
                return item.args
        return None


@dataclass(frozen=True, slots=True)
class Array:
    items: tuple[Any, ...]


@dataclass(frozen=True, slots=True)
class Bytes:
    """A string argument: ``"abc"`` (``"abc"...`` allows a longer actual value)."""

    text: str
    prefix_only: bool = False


# -- packets ------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TcpOption:
    kind: str  #: nop eol mss wscale sackOK sack TS md5 FO FOEXP unknown
    values: tuple[Any, ...] = ()


@dataclass(slots=True)
class PacketSpec:
    direction: str  #: "<" inbound (injected), ">" outbound (expected)
    protocol: str  #: tcp udp icmp
    flags: str = ""  #: packetdrill's letters: F S R P . E W A U
    seq: int = 0
    end_seq: int = 0
    payload: int = 0
    ack: int | None = None
    win: int | None = None  #: None: not checked (outbound) / an error (inbound)
    urg: int = 0
    options: tuple[TcpOption, ...] | None = ()  #: None: <...>, options not checked
    ecn: str | None = None  #: noecn ect0 ect1 ce ect01 (checked/set when given)
    tos: int | None = None
    ttl: int | None = None
    flowlabel: int | None = None
    src_port: int | None = None
    dst_port: int | None = None
    ace: int | None = None  #: AccECN ACE value (flags like ".5")
    # ICMP
    icmp_type: str = ""
    icmp_code: str = ""
    icmp_mtu: int | None = None
    echoed: tuple[str, int, int] | None = None  #: ("tcp", seq, len) / ("udp", 0, len)
    encapsulated: bool = False  #: ipv4/ipv6 outer addresses, GRE or MPLS prefix


@dataclass(slots=True)
class SyscallSpec:
    name: str
    args: tuple[Any, ...]
    result: Any
    errno: str | None
    note: str | None
    end_usecs: int | None  #: the `...` end time of a blocking call


@dataclass(slots=True)
class CommandSpec:
    command: str
    line: int = 0  #: for the init and cleanup commands, which have no event


@dataclass(slots=True)
class CodeSpec:
    text: str


@dataclass(slots=True)
class Event:
    line: int
    time_type: TimeType
    time_usecs: int
    time_end_usecs: int
    action: PacketSpec | SyscallSpec | CommandSpec | CodeSpec
    #: filled in by the runner, as adjust_relative_event_times does
    offset_usecs: int = 0


@dataclass(slots=True)
class Script:
    path: str
    options: list[tuple[int, str, str | None]] = field(default_factory=list)
    init_command: CommandSpec | None = None
    cleanup_command: CommandSpec | None = None
    events: list[Event] = field(default_factory=list)
