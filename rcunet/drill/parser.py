"""The packetdrill grammar (google/packetdrill ``parser.y``) by recursive descent.

    script  : option* init_command? event+
    event   : event_time (packet | syscall | `command` | %{ code }%)
    time    : [+]T | * | T~T | +T~+T          (T in seconds: 0, .1, 1.5)

Every error is a ``DrillError`` naming the line; the checks parser.y makes as
"semantic errors" (ranges, inconsistent sequence numbers, <...> on inbound) are made here.
"""

from __future__ import annotations

from typing import Any

from rcunet.drill import script as s
from rcunet.drill.errors import DrillError, DrillUnsupported
from rcunet.drill.lexer import Token, tokenize

_TCP_FLAG_LETTERS = set("FSRP.EWAUN")
_ECN_WORDS = {"NOECN": "noecn", "ECT0": "ect0", "ECT1": "ect1", "CE": "ce",
              "ECT01": "ect01"}
U32, U16, U8 = 0xFFFFFFFF, 0xFFFF, 0xFF


def parse(text: str, path: str = "<script>") -> s.Script:
    return _Parser(tokenize(text), path).script()


def parse_file(path: str) -> s.Script:
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as exc:
        raise DrillError(0, f"cannot read {path}: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise DrillError(line, "the script is not UTF-8 text") from None
    return parse(text, path)


def _usecs(seconds: float) -> int:
    return int(round(seconds * 1_000_000))


class _Parser:
    def __init__(self, tokens: list[Token], path: str) -> None:
        self.tokens = tokens
        self.pos = 0
        self.path = path

    # -- token helpers ----------------------------------------------------------------
    def peek(self, ahead: int = 0) -> Token | None:
        i = self.pos + ahead
        return self.tokens[i] if i < len(self.tokens) else None

    def kind(self, ahead: int = 0) -> str:
        tok = self.peek(ahead)
        return tok.kind if tok is not None else "EOF"

    @property
    def line(self) -> int:
        tok = self.peek()
        if tok is not None:
            return tok.line
        return self.tokens[-1].line if self.tokens else 1

    def next(self) -> Token:
        tok = self.peek()
        if tok is None:
            raise DrillError(self.line, "unexpected end of script")
        self.pos += 1
        return tok

    def accept(self, kind: str) -> Token | None:
        if self.kind() == kind:
            return self.next()
        return None

    def expect(self, kind: str, what: str | None = None) -> Token:
        tok = self.peek()
        if tok is None or tok.kind != kind:
            found = "end of script" if tok is None else repr(tok.text)
            raise DrillError(self.line, f"syntax error: expected {what or kind}, found {found}")
        self.pos += 1
        return tok

    def error(self, message: str) -> DrillError:
        return DrillError(self.line, message)

    def integer(self, what: str, low: int = 0, high: int = U32) -> int:
        tok = self.peek()
        if tok is None or tok.kind not in ("INTEGER", "HEX_INTEGER"):
            raise self.error(f"syntax error: expected {what}, found "
                             f"{'end of script' if tok is None else repr(tok.text)}")
        self.pos += 1
        value = int(tok.value)  # type: ignore[call-overload]
        if not low <= value <= high:
            raise DrillError(tok.line, f"{what} out of range: {value}")
        return value

    # -- script -----------------------------------------------------------------------
    def script(self) -> s.Script:
        script = s.Script(self.path)
        while self.kind() == "OPTION":
            script.options.append(self.option())
        if self.kind() == "BACK_QUOTED":
            # parser.y: a command before the first event is the init command
            tok = self.next()
            script.init_command = s.CommandSpec(str(tok.value), tok.line)
        while self.peek() is not None:
            if self.kind() == "BACK_QUOTED" and self.kind(1) == "EOF":
                tok = self.next()
                script.cleanup_command = s.CommandSpec(str(tok.value), tok.line)
                break
            script.events.append(self.event())
        if not script.events:
            raise DrillError(self.line, "the script has no events")
        first = script.events[0]
        if first.time_type is not s.TimeType.ANY and first.time_usecs != 0 and \
                first.time_type is s.TimeType.ABSOLUTE:
            raise DrillError(first.line, "first event should be at time 0")
        return script

    def option(self) -> tuple[int, str, str | None]:
        tok = self.next()
        name = str(tok.value)
        if not self.accept("="):
            return tok.line, name, None
        parts = [self.next().text]
        # WORD '=' WORD / STRING / BACK_QUOTED (-D NAME=VALUE style values)
        if self.kind() == "=" and self.peek(1) is not None:
            self.next()
            parts.append("=" + self.next().text)
        value = "".join(parts)
        if value.startswith('"') and value.endswith('"'):
            value = value[1:-1]
        return tok.line, name, value

    # -- events -----------------------------------------------------------------------
    def event_time(self) -> tuple[s.TimeType, int, int]:
        if self.accept("*"):
            return s.TimeType.ANY, 0, 0
        relative = bool(self.accept("+"))
        start = self.time()
        if self.accept("~"):
            if relative and not self.accept("+"):
                raise self.error("syntax error: a relative time range is +a~+b")
            end = self.time()
            if end < start:
                raise self.error("time range end is before its start")
            kind = s.TimeType.RELATIVE_RANGE if relative else s.TimeType.ABSOLUTE_RANGE
            return kind, start, end
        if start < 0:
            raise self.error("negative time")
        return (s.TimeType.RELATIVE if relative else s.TimeType.ABSOLUTE), start, start

    def time(self) -> int:
        tok = self.peek()
        if tok is None or tok.kind not in ("FLOAT", "INTEGER"):
            raise self.error("syntax error: expected a time (seconds), found "
                             f"{'end of script' if tok is None else repr(tok.text)}")
        self.pos += 1
        value = float(tok.value)  # type: ignore[arg-type]
        if abs(value) > 1e7:
            raise DrillError(tok.line, f"time out of range: {tok.text}")
        return _usecs(value)

    def event(self) -> s.Event:
        line = self.line
        time_type, start, end = self.event_time()
        kind = self.kind()
        action: s.PacketSpec | s.SyscallSpec | s.CommandSpec | s.CodeSpec
        if kind in ("<", ">"):
            action = self.packet()
        elif kind == "BACK_QUOTED":
            action = s.CommandSpec(str(self.next().value))
        elif kind == "CODE":
            action = s.CodeSpec(str(self.next().value))
        elif kind in ("ELLIPSIS", "WORD"):
            action = self.syscall()
        else:
            raise self.error(f"syntax error: expected a packet, system call, command or "
                             f"code after the time, found {self.peek().text!r}"  # type: ignore[union-attr]
                             if self.peek() else "syntax error: unexpected end of script")
        return s.Event(line, time_type, start, end, action)

    # -- packets ----------------------------------------------------------------------
    def packet(self) -> s.PacketSpec:
        direction = self.next().kind
        spec = s.PacketSpec(direction, "tcp")
        # packet_prefix: ipv4 A > B: / ipv6 A > B: / gre ...: / mpls ...:
        while self.kind() in ("IPV4", "IPV6", "GRE", "MPLS"):
            raise DrillUnsupported(self.line, f"encapsulated packets ({self.peek().text} "  # type: ignore[union-attr]
                                              "prefix) are not supported")
        self.ip_info(spec)
        if self.kind() == "ENCAP":
            raise DrillUnsupported(self.line, "PSP encapsulation is not supported")
        if self.kind() == "UDP":
            self.next()
            spec.protocol = "udp"
            self.port_info(spec)
            self.expect("(")
            spec.payload = self.integer("UDP payload size", 0, U16)
            self.expect(")")
            return spec
        if self.kind() == "ICMP":
            self.next()
            spec.protocol = "icmp"
            spec.icmp_type = self.expect("WORD", "an ICMP type").text
            if self.kind() == "WORD":
                spec.icmp_code = self.next().text
            if self.accept("MTU"):
                spec.icmp_mtu = self.integer("ICMP MTU", 0, U16)
            if self.accept("ID"):
                self.integer("ICMP echo id", 0, U16)
            if self.accept("["):
                if self.accept("UDP"):
                    self.expect("(")
                    spec.echoed = ("udp", 0, self.integer("UDP payload size", 0, U16))
                    self.expect(")")
                elif self.accept("RAW"):
                    raise DrillUnsupported(self.line, "ICMP with a raw echoed payload")
                else:
                    start, _end, length = self.seq()
                    spec.echoed = ("tcp", start, length)
                self.expect("]")
            return spec
        self.port_info(spec)
        self.tcp_flags(spec)
        spec.seq, spec.end_seq, spec.payload = self.seq()
        if self.accept("ACK"):
            spec.ack = self.integer("TCP ack sequence number")
        if self.accept("WIN"):
            spec.win = self.integer("TCP window", 0, U16)
        elif direction == "<":
            raise self.error("window must be specified for inbound packets")
        if self.accept("URG"):
            spec.urg = self.integer("TCP urgent pointer", 0, U16)
        if self.kind() == "<":
            spec.options = self.tcp_options(direction)
        return spec

    def ip_info(self, spec: s.PacketSpec) -> None:
        if self.kind() not in ("(", "["):
            return
        close = ")" if self.next().kind == "(" else "]"
        while True:
            kind = self.kind()
            if kind in _ECN_WORDS:
                self.next()
                spec.ecn = _ECN_WORDS[kind]
                if spec.ecn == "ect01" and spec.direction == "<":
                    raise self.error("[ect01] can only be used with outbound packets")
            elif kind == "TOS":
                self.next()
                spec.tos = self.integer("tos", 0, U8)
            elif kind == "TTL":
                self.next()
                spec.ttl = self.integer("ttl", 0, U8)
            elif kind == "FLOWLABEL":
                self.next()
                spec.flowlabel = self.integer("flowlabel", 0, 0xFFFFF)
            else:
                raise self.error(f"syntax error in IP info: {self.peek().text!r}"  # type: ignore[union-attr]
                                 if self.peek() else "unexpected end of script")
            if not self.accept(","):
                break
        self.expect(close)

    def port_info(self, spec: s.PacketSpec) -> None:
        if self.kind() == "INTEGER" and self.kind(1) == ">":
            spec.src_port = self.integer("source port", 0, U16)
            self.expect(">")
            spec.dst_port = self.integer("destination port", 0, U16)

    def tcp_flags(self, spec: s.PacketSpec) -> None:
        kind = self.kind()
        if kind == "-":
            self.next()
            spec.flags = ""
            return
        text = ""
        if kind == "WORD":
            text = self.next().text
            if self.kind() == ".":
                self.next()
                if text[-1:].isdigit():  # F5.: FIN, ACK with AccECN ACE 5
                    text, spec.ace = text[:-1], int(text[-1])
                text += "."
            elif self.kind() == "FLOAT":  # ack_and_ace: S.5
                ace = self.next().text
                text += "."
                spec.ace = int(ace.lstrip(".") or 0)
        elif kind == ".":
            self.next()
            text = "."
        elif kind == "FLOAT":  # .5: ACK with AccECN ACE 5
            text = "."
            spec.ace = int(self.next().text.lstrip(".") or 0)
        else:
            raise self.error("syntax error: expected TCP flags, found "
                             f"{self.peek().text!r}" if self.peek() else  # type: ignore[union-attr]
                             "syntax error: expected TCP flags")
        bad = set(text) - _TCP_FLAG_LETTERS
        if bad:
            raise self.error(f"unknown TCP flag(s) {''.join(sorted(bad))!r} in {text!r}")
        spec.flags = text

    def seq(self) -> tuple[int, int, int]:
        start = self.integer("TCP start sequence number")
        self.expect(":", "':' in a start:end(len) range")
        end = self.integer("TCP end sequence number")
        self.expect("(")
        length = self.integer("TCP payload size", 0, U16)
        self.expect(")")
        if (start + length) & U32 != end:
            raise self.error("inconsistent TCP sequence numbers and payload size")
        return start, end, length

    def tcp_options(self, direction: str) -> tuple[s.TcpOption, ...] | None:
        self.expect("<")
        if self.accept("ELLIPSIS"):
            self.expect(">")
            if direction == "<":
                raise self.error("<...> for TCP options can only be used with outbound "
                                 "packets")
            return None
        options = [self.tcp_option()]
        while self.accept(","):
            options.append(self.tcp_option())
        self.expect(">", "'>' closing the TCP options")
        return tuple(options)

    def tcp_option(self) -> s.TcpOption:
        tok = self.next()
        kind = tok.kind
        if kind == "NOP":
            return s.TcpOption("nop")
        if kind == "EOL":
            return s.TcpOption("eol")
        if kind == "MSS":
            return s.TcpOption("mss", (self.integer("mss value", 0, U16),))
        if kind == "WSCALE":
            return s.TcpOption("wscale", (self.integer("window scale shift count", 0, U8),))
        if kind == "SACKOK":
            return s.TcpOption("sackOK")
        if kind == "SACK":
            blocks = []
            while self.kind() == "INTEGER" and self.kind(1) == ":":
                left = self.integer("SACK block left edge")
                self.expect(":")
                right = self.integer("SACK block right edge")
                blocks.append((left, right))
            if not blocks:
                raise self.error("a sack option needs at least one block")
            if len(blocks) > 4:
                raise self.error("too many SACK blocks (at most 4)")
            return s.TcpOption("sack", tuple(blocks))
        if kind == "TS":
            self.expect("VAL")
            val = self.integer("ts val")
            self.expect("ECR")
            ecr = self.integer("ecr val")
            return s.TcpOption("TS", (val, ecr))
        if kind in ("FO", "FOEXP"):
            cookie = ""
            if self.kind() in ("WORD", "INTEGER", "HEX_INTEGER"):
                cookie = self.next().text
            return s.TcpOption(kind, (cookie,))
        if kind == "MD5":
            return s.TcpOption("md5", (self.next().text,))
        if kind == "ECN":  # AccECN: ECN [e0b|e1b|ceb N]...
            fields = []
            while self.kind() in ("E0B", "E1B", "CEB"):
                name = self.next().text.lower()
                fields.append((name, self.integer(f"AccECN {name} counter", 0, 0xFFFFFF)))
            return s.TcpOption("accecn", tuple(fields))
        raise DrillError(tok.line, f"unknown TCP option {tok.text!r}")

    # -- system calls -----------------------------------------------------------------
    def syscall(self) -> s.SyscallSpec:
        end: int | None = None
        if self.accept("ELLIPSIS"):
            end = self.time()
        name = self.expect("WORD", "a system call name").text
        self.expect("(", f"'(' after {name}")
        args: list[Any] = []
        if not self.accept(")"):
            args = self.expression_list()
            self.expect(")", f"')' closing the arguments of {name}")
        self.expect("=", f"'=' and the result of {name}")
        result = self.expression()
        errno_name = None
        note = None
        if self.kind() == "WORD" and self.peek() is not None and \
                self.peek().text.startswith("E"):  # type: ignore[union-attr]
            errno_name = self.next().text
        if self.kind() == "(":
            note = self.note()
        return s.SyscallSpec(name, tuple(args), result, errno_name, note, end)

    def note(self) -> str:
        self.expect("(")
        depth, words = 1, []
        while depth:
            tok = self.next()
            if tok.kind == "(":
                depth += 1
            elif tok.kind == ")":
                depth -= 1
                if not depth:
                    break
            words.append(tok.text)
        return " ".join(words)

    def expression_list(self) -> list[Any]:
        items = [self.expression()]
        while self.accept(","):
            items.append(self.expression())
        return items

    def expression(self) -> Any:
        left = self.primary()
        while self.accept("|"):
            left = s.BinOr(left, self.primary())
        return left

    def primary(self) -> Any:
        tok = self.peek()
        if tok is None:
            raise self.error("syntax error: expected an expression, found end of script")
        kind = tok.kind
        if kind == "ELLIPSIS":
            self.next()
            return s.ELLIPSIS
        if kind in ("INTEGER", "HEX_INTEGER"):
            self.next()
            return int(tok.value)  # type: ignore[call-overload]
        if kind == "-" and self.kind(1) in ("INTEGER", "HEX_INTEGER"):
            self.next()
            return -int(self.next().value)  # type: ignore[call-overload]
        if kind == "STRING":
            text = ""
            while self.kind() == "STRING":
                text += str(self.next().value)
            if self.accept("ELLIPSIS"):
                return s.Bytes(text, prefix_only=True)
            return s.Bytes(text)
        if kind == "[":
            self.next()
            if self.accept("]"):
                return s.Array(())
            items = self.expression_list()
            self.expect("]")
            return s.Array(tuple(items))
        if kind == "{":
            self.next()
            items = []
            if not self.accept("}"):
                items.append(self.struct_item())
                while self.accept(","):
                    items.append(self.struct_item())
                self.expect("}", "'}' closing the structure")
            return s.Struct(tuple(items))
        if kind == "WORD" or kind.isupper() and kind.isalpha() or "_" in kind:
            # a symbol, a call (htons(8080)), or name=value
            name = self.next().text
            if self.kind() == "(":
                self.next()
                args: list[Any] = []
                if not self.accept(")"):
                    args = self.expression_list()
                    self.expect(")")
                if self.accept("="):
                    return s.Assign(name, tuple(args), self.expression())
                return s.Call(name, tuple(args))
            if self.accept("="):
                return s.Assign(name, None, self.expression())
            return s.Symbol(name)
        raise self.error(f"syntax error: unexpected {tok.text!r} in an expression")

    def struct_item(self) -> Any:
        return self.expression()
