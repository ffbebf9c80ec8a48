"""The drill engine itself: the parser's reading of the language, its errors on bad
input (each names the line, none is a traceback), and the matcher catching a stack that
does not do what the script says."""

from __future__ import annotations

import pytest

from rcunet.drill import script as s
from rcunet.drill.commands import Commands
from rcunet.drill.errors import DrillError, DrillUnsupported
from rcunet.drill.parser import parse, parse_file
from rcunet.drill.runner import run_script
from rcunet.host.host import Host

PASSIVE = """0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 65535 <mss 1000,sackOK,nop,nop,nop,wscale 7>
+0 > S. 0:0(0) ack 1 <mss 1460,nop,nop,sackOK,nop,wscale 7>
+.1 < . 1:1(0) ack 1 win 257
+0 accept(3, ..., ...) = 4
"""


def test_times_packets_and_calls_are_read_as_packetdrill_reads_them() -> None:
    script = parse("--tolerance_usecs=10000\n`./defaults.sh`\n" + PASSIVE +
                   "+0.1~+0.2 > P. 1:101(100) ack 1 win 257 <nop,nop,TS val 1 ecr 2>\n"
                   "* < [ect0] . 1:1(0) ack 101 win 257 <sack 1:2 3:4,nop,nop>\n"
                   "+0...0.3 read(4, ..., 100) = -1 EAGAIN (Resource temporarily unavailable)\n"
                   "+0 %{ assert tcpi_rto > 0 }%\n")
    assert script.options == [(1, "tolerance_usecs", "10000")]
    assert script.init_command is not None
    events = script.events
    assert events[5].time_type is s.TimeType.RELATIVE and events[5].time_usecs == 100000
    ranged = events[7]
    assert ranged.time_type is s.TimeType.RELATIVE_RANGE
    assert (ranged.time_usecs, ranged.time_end_usecs) == (100000, 200000)
    packet = ranged.action
    assert isinstance(packet, s.PacketSpec)
    assert (packet.flags, packet.seq, packet.payload, packet.ack, packet.win) == (
        "P.", 1, 100, 1, 257)
    assert packet.options == (s.TcpOption("nop"), s.TcpOption("nop"),
                              s.TcpOption("TS", (1, 2)))
    star = events[8]
    assert star.time_type is s.TimeType.ANY
    assert star.action.ecn == "ect0"  # type: ignore[union-attr]
    assert star.action.options[0] == s.TcpOption("sack", ((1, 2), (3, 4)))  # type: ignore[union-attr,index]
    call = events[9].action
    assert isinstance(call, s.SyscallSpec)
    assert (call.name, call.result, call.errno, call.end_usecs) == ("read", -1, "EAGAIN",
                                                                    300000)
    assert isinstance(events[10].action, s.CodeSpec)


@pytest.mark.parametrize(("text", "line", "words"), [
    ("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 < S 0:0(0) <mss 1000>\n", 2,
     "window must be specified"),
    ("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n\n+0 < S. 0:10(5) win 1\n", 3,
     "inconsistent TCP sequence numbers"),
    ("0 < S 0:0(0) win 70000\n", 1, "TCP window out of range"),
    ("0 < S 0:0(0) win 1 <...>\n", 1, "<...> for TCP options can only be used with outbound"),
    ("0 < S 0:0(0) win 1 <mss 1000, bogus 3>\n", 1, "unknown TCP option"),
    ("0 < SZ 0:0(0) win 1\n", 1, "unknown TCP flag"),
    ("0 read(3, ..., 10\n", 1, "end of script"),
    ("0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n+0 `echo", 2, "unterminated"),
    ("0.5 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n", 1, "first event should be at time 0"),
    ("0 close(3) = 0\n+0 ?? = 1\n", 2, "syntax error"),
    ("", 1, "no events"),
])
def test_bad_scripts_are_errors_naming_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(DrillError) as info:
        parse(text)
    assert info.value.line == line
    assert words in info.value.message


def test_a_huge_or_binary_file_is_an_error(tmp_path: pytest.TempPathFactory) -> None:
    huge = tmp_path / "huge.pkt"  # type: ignore[operator]
    huge.write_text("// x\n" * 1_000_000)
    with pytest.raises(DrillError, match="at most"):
        parse_file(str(huge))
    binary = tmp_path / "bin.pkt"  # type: ignore[operator]
    binary.write_bytes(b"0 close(3) = 0\n\xff\xfe\n")
    with pytest.raises(DrillError) as info:
        parse_file(str(binary))
    assert info.value.line == 2


def _run(text: str, family: int = 4) -> tuple[str, int, str]:
    result = run_script(parse(text, "t.pkt"), family)
    return result.status, result.line, result.message


def test_a_passing_exchange_passes_in_both_families() -> None:
    for family in (4, 6):
        assert _run(PASSIVE + "+0 write(4, ..., 10) = 10\n+0 > P. 1:11(10) ack 1 <...>\n",
                    family)[0] == "pass"


@pytest.mark.parametrize(("tail", "line", "words"), [
    ("+0 write(4, ..., 10) = 10\n+0 > P. 1:12(11) ack 1 <...>\n", 9,
     "live packet payload: expected 11 bytes"),
    ("+0 write(4, ..., 10) = 10\n+0 > . 1:11(10) ack 1 <...>\n", 9,
     "live packet field tcp_psh: expected: 0"),
    ("+0 write(4, ..., 10) = 10\n+0 > P. 1:11(10) ack 2 <...>\n", 9, "tcp_ack_seq"),
    ("+0 write(4, ..., 10) = 10\n+0 > P. 1:11(10) ack 1 <nop>\n", 9,
     "tcp_data_offset"),
    ("+0 write(4, ..., 10) = 10\n+.5 > P. 1:11(10) ack 1 <...>\n", 9, "timing error"),
    ("+0 read(4, ..., 10) = 10\n", 8, "read() blocked and nothing unblocked it"),
    ("+0 fcntl(4, F_SETFL, O_RDWR|O_NONBLOCK) = 0\n+0 read(4, ..., 10) = -1 EINTR\n", 9,
     "Expected errno EINTR but got EAGAIN"),
    ("+0 > . 1:1(0) ack 1 <...>\n", 8, "timed out waiting for packet"),
    ("+0 %{ assert tcpi_snd_mss == 1, tcpi_snd_mss }%\n", 8, "assertion failed: 1000"),
])
def test_a_stack_that_differs_fails_with_the_evidence(tail: str, line: int, words: str) -> None:
    status, at, message = _run(PASSIVE + tail)
    assert (status, at) == ("fail", line), message
    assert words in message


def test_a_code_block_whose_last_line_continues_runs() -> None:
    """packetdrill writes each block followed by two newlines (code.c), so a last line
    ending in a backslash continues into an empty one (tcp-info-rwnd-limited.pkt)."""
    tail = "+0 %{ assert tcpi_snd_mss == 1000, tcpi_snd_mss;\\\n}%\n"
    assert _run(PASSIVE + tail)[0] == "pass"


@pytest.mark.parametrize(("count", "status"), [(1, "pass"), (2, "fail")])
def test_nstat_pipelines_filter_its_lines_as_grep_does(count: int, status: str) -> None:
    """The kernel scripts' ``nstat | grep NAME | grep -q " N "``: nstat's lines (name,
    delta since the last call, rate), each grep a filter, the status the last one's;
    ``nstat -n`` only resets the history."""
    tail = ("+0 `nstat -n`\n+0 < P. 1:11(10) ack 1 win 257\n+0 > . 1:1(0) ack 11 <...>\n"
            f'+0 `nstat | grep TcpInSegs| grep -q " {count} "`\n')
    result = _run(PASSIVE + tail)
    assert result[0] == status, result


@pytest.mark.parametrize(("tail", "words"), [
    ("+0 frobnicate(4) = 0\n", "frobnicate() is not supported"),
    ("+0 `rm -rf /`\n", "command `rm -rf /` is not supported"),
    ("+0 `sysctl -q net.ipv4.tcp_nonsense=1`\n", "tcp_nonsense"),
    ("+0 %{ import os }%\n", "Import"),
    ("+0 %{ assert tcpi_unheard_of == 0 }%\n", "tcpi_unheard_of"),
    ("+0 setsockopt(4, SOL_TCP, TCP_NODELAY, [UNKNOWN_THING], 4) = 0\n", "UNKNOWN_THING"),
])
def test_unsupported_features_are_named(tail: str, words: str) -> None:
    status, _line, message = _run(PASSIVE + tail)
    assert status == "unsupported", message
    assert words in message


@pytest.mark.parametrize("garbage", [
    "+0 < . 1:1(0) ack 4294967295 win 0 <sack 4294967295:0,TS val 4294967295 ecr 0>\n",
    "+0 < FSRPEWAU. 4294967000:4294967096(96) ack 99 win 65535 urg 65535\n",
    "+0 < icmp unreachable frag_needed mtu 0 [1:1(0)]\n",
    "+0 < S 0:0(0) win 1 <mss 0,wscale 255,sackOK,FO,FOEXP,md5 00>\n",
])
def test_nothing_a_script_injects_raises_out_of_the_host(garbage: str) -> None:
    for family in (4, 6):
        status, _line, message = _run(PASSIVE + garbage + "+0 close(4) = 0\n", family)
        assert status in ("pass", "fail"), message
        assert "RcunetRxExceptions" not in message and "raised" not in message


def test_script_option_pins_family() -> None:
    status, line, message = _run("--ip_version=ipv4\n" + PASSIVE, family=6)
    assert (status, line) == ("unsupported", 1)
    assert isinstance(DrillUnsupported(1, message), DrillError)


def test_cli_lines_json_table_and_exit_status(tmp_path: pytest.TempPathFactory,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from rcunet.cli import main

    good = tmp_path / "good.pkt"  # type: ignore[operator]
    good.write_text(PASSIVE)
    bad = tmp_path / "bad.pkt"  # type: ignore[operator]
    bad.write_text(PASSIVE + "+0 > P. 1:2(1) ack 1 <...>\n")
    broken = tmp_path / "broken.pkt"  # type: ignore[operator]
    broken.write_text("0 < S 0:0(0)\n")
    assert main(["drill", str(good)]) == 0
    out = capsys.readouterr().out
    assert "pass        ipv4" in out and "pass        ipv6" in out
    assert main(["drill", "--family", "4", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert f"fail        ipv4 {bad}:8: timed out waiting for packet" in out
    assert f"error       ipv4 {broken}:1: window must be specified" in out
    assert "Traceback" not in out
    assert main(["drill", "--json", "--family", "6", str(good)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["pass"] == 1 and doc["results"][0]["family"] == 6
    assert main(["drill", "--table", "--root", str(tmp_path), str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "| good.pkt | pass | pass |  |" in out
    assert "1 of 3 scripts pass in every family run." in out


def test_accecn_option_is_read_and_encoded_in_its_fields_order() -> None:
    """packetdrill's ``ECN e1b 1 ceb 0 e0b 1``: kind 174 when e1b comes first, 172 when
    e0b does (RFC 9768 §3.2.3), each field 3 bytes; printed back the same way."""
    from rcunet.drill import frames as fr

    script = parse("0 < . 1:1(0) ack 1 win 257 <ECN e1b 1 ceb 0 e0b 1,nop>\n", "t.pkt")
    packet = script.events[0].action
    assert isinstance(packet, s.PacketSpec) and packet.options
    option = packet.options[0]
    assert option == s.TcpOption("accecn", (("e1b", 1), ("ceb", 0), ("e0b", 1)))
    raw = fr.accecn_option(option.values)
    assert (raw.kind, raw.data) == (174, bytes.fromhex("000001000000000001"))
    assert fr.option_text(raw) == "ECN e1b 1 ceb 0 e0b 1"
    zero = fr.accecn_option((("e0b", 5), ("ceb", 7)))
    assert (zero.kind, zero.data, fr.option_text(zero)) == (
        172, bytes.fromhex("000005000007"), "ECN e0b 5 ceb 7")
    assert fr.accecn_option(()).kind == 174 and fr.option_text(fr.accecn_option(())) == "ECN"
    with pytest.raises(ValueError):
        fr.accecn_option((("ceb", 0), ("e1b", 1)))


@pytest.mark.parametrize(("tail", "status", "words"), [
    # the stack takes a segment carrying the option (an unknown option to it)
    ("+0 < P. 1:11(10) ack 1 win 257 <ECN e0b 1 ceb 0 e1b 1,nop>\n"
     "+0 > . 1:1(0) ack 11 <...>\n+0 read(4, ..., 100) = 10\n", "pass", ""),
    # an expected option the stack does not send fails
    ("+0 < P. 1:11(10) ack 1 win 257\n+0 > . 1:1(0) ack 11 <ECN e1b 1 ceb 0 e0b 1,nop>\n",
     "fail", "tcp_data_offset"),
    ("+0 < P. 1:11(10) ack 1 win 257 <ECN ceb 0 e1b 1,nop>\n", "error",
     "neither option's order"),
])
def test_accecn_option_in_a_script(tail: str, status: str, words: str) -> None:
    result = _run(PASSIVE + tail)
    assert result[0] == status, result
    assert words in result[2]


@pytest.mark.parametrize(("value", "status"), [
    ("999", "fail"), ("120001", "fail"), ("1000", "pass"), ("120000", "pass")])
def test_sysctl_out_of_its_bounds_fails_and_changes_nothing(value: str, status: str) -> None:
    """proc_dointvec_minmax refuses net.ipv4.tcp_rto_max_ms outside 1000..120000 (the
    sysctl command fails, the setting stays); ``a || b`` runs b after the refusal."""
    opened = "+0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3\n"
    result = _run(f"0 `sysctl -q net.ipv4.tcp_rto_max_ms={value}`\n" + opened)
    assert result[0] == status, result
    now = 3000 if status == "fail" else value
    fallback = (f"0 `sysctl -q net.ipv4.tcp_rto_max_ms={value} || "
                "sysctl -q net.ipv4.tcp_rto_max_ms=3000`\n" + opened
                + f"+0 getsockopt(3, IPPROTO_TCP, TCP_RTO_MAX_MS, [{now}], [4]) = 0\n")
    assert _run(fallback)[0] == "pass"


_MD5 = "<nop,nop,md5 00000000000000000000000000000000>"
_KEYED = """0 socket(..., SOCK_STREAM, IPPROTO_TCP) = 3
+0 setsockopt(3, IPPROTO_TCP, TCP_MD5SIG, {tcpm_key="one"}, 216) = 0
+0 bind(3, ..., ...) = 0
+0 listen(3, 1) = 0
+0 < S 0:0(0) win 65535 <nop,nop,md5 00000000000000000000000000000000,mss 1000>
+0 > S. 0:0(0) ack 1 <nop,nop,md5 00000000000000000000000000000000,mss 1460>
+.1 < . 1:1(0) ack 1 win 257 <nop,nop,md5 00000000000000000000000000000000>
+0 accept(3, ..., ...) = 4
"""


@pytest.mark.parametrize(("rekey", "status"), [("one", "pass"), ("two", "fail")])
def test_md5_digests_are_made_and_checked_under_the_scripts_key(rekey: str,
                                                                 status: str) -> None:
    """The engine signs what it injects with the key a socket of the script holds and
    checks the digest of what the Host sends: once the listener's key differs from the
    one its child copied, the child's segments no longer check out."""
    tail = (f'+0 setsockopt(3, IPPROTO_TCP, TCP_MD5SIG, {{tcpm_key="{rekey}"}}, 216) = 0\n'
            f"+0 write(4, ..., 10) = 10\n+0 > P. 1:11(10) ack 1 {_MD5}\n")
    result = _run(_KEYED + tail)
    assert result[0] == status, result
    if status == "fail":
        assert "MD5 digest" in result[2]


@pytest.mark.parametrize(("pipeline", "status"), [
    ('grep " 0A " /proc/net/tcp /proc/net/tcp6 | grep ":1F90"', "pass"),  # the listener
    ('grep " 01 " /proc/net/tcp /proc/net/tcp6 | grep ":1F90"', "pass"),  # the child
    ('grep " 0A " /proc/net/tcp /proc/net/tcp6 | grep ":1F91"', "fail"),
])
def test_proc_net_tcp_lists_the_hosts_sockets(pipeline: str, status: str) -> None:
    """``grep`` over /proc/net/tcp{,6}: the Host's listeners and connections, state and
    ports in hex as tcp4_seq_show prints them (8080 is 1F90)."""
    for family in (4, 6):
        result = _run(PASSIVE + f"+0 `{pipeline}`\n", family)
        assert result[0] == status, result


@pytest.mark.parametrize(("command", "status"), [
    ("ip link set dev tun0 mtu 9000", "pass"), ("ip link set tun0 mtu 9000", "pass"),
    ("ip link set dev tun0 mtu 67", "fail"), ("ip link set dev tun9 mtu 9000", "fail")])
def test_ip_link_set_mtu_changes_the_device_mtu(command: str, status: str) -> None:
    """``ip link set dev tun0 mtu N`` sets the Host's tun0 MTU, so the SYN-ACK advertises
    N - 40 (IPv4); ip fails (the script with it) on an unknown device or an MTU below a
    tun's 68."""
    script = PASSIVE.replace("<mss 1460,", "<mss 8960,")
    result = _run(f"0 `{command}`\n" + script, 4)
    assert result[0] == status, result


def test_ip_tos_marks_the_segments_of_an_ipv4_connection() -> None:
    """IP_TOS on a connected socket: later IPv4 segments carry it, the ECN field left
    the connection's (__ip_sock_set_tos masks INET_ECN_MASK for a stream socket)."""
    tail = ("+0 setsockopt(4, SOL_IP, IP_TOS, [0x13], 4) = 0\n+0 write(4, ..., 10) = 10\n"
            "+0 > (tos {tos}) P. 1:11(10) ack 1 <...>\n")
    assert _run(PASSIVE + tail.format(tos="0x10"), 4)[0] == "pass"
    assert _run(PASSIVE + tail.format(tos="0x13"), 4)[0] == "fail"


@pytest.mark.parametrize(("command", "status"), [
    ("ethtool -K tun0 tso off", "pass"),
    ("ethtool -K tun0 tso off gso off gro off lro off", "pass"),
    ("ethtool -K tun9 tso off", "fail"),
    ("ethtool -K tun0 tso on", "unsupported"),
    ("ethtool -K tun0 rx-checksum off", "unsupported"),
])
def test_ethtool_turns_off_offloads_rcunet_does_not_have(command: str, status: str) -> None:
    """``ethtool -K tun0 tso off ...``: rcunet's interfaces have no segmentation or
    receive offloads, so switching them off is a no-op; an unknown device fails as
    ethtool does; anything else is named unsupported."""
    assert _run(f"0 `{command}`\n" + PASSIVE)[0] == status


@pytest.mark.parametrize(("command", "status"), [
    ("tc qdisc add dev tun0 root pfifo", "pass"),
    ("tc qdisc replace dev tun0 root pfifo limit 100", "pass"),
    ("tc qdisc delete dev tun0 root 2>/dev/null ; tc qdisc add dev tun0 root pfifo", "pass"),
    ("tc qdisc replace dev tun0 root pfifo limit 0", "unsupported"),
    ("tc qdisc replace dev tun0 root fq", "unsupported"),
    ("tc qdisc add dev tun0 root netem delay 10ms", "unsupported"),
    ("tc filter show dev tun0", "unsupported"),
])
def test_tc_qdisc_is_a_no_op_only_where_a_fifo_changes_nothing(command: str,
                                                               status: str) -> None:
    """A pfifo (or no qdisc) is what rcunet's link already is; fq's pacing, a pfifo
    that drops everything and any other qdisc change what TCP sees, so a script that
    asks for one is unsupported rather than run as if it had it."""
    assert _run(f"0 `{command}`\n" + PASSIVE)[0] == status


@pytest.mark.parametrize(("command", "status"), [
    ("echo 1 > /sys/module/tcp_cubic/parameters/hystart_detect", "pass"),
    ("echo 0x2 > /sys/module/tcp_cubic/parameters/hystart_detect", "pass"),
    ("echo 0 > /sys/module/tcp_cubic/parameters/hystart", "pass"),
    ("echo 41 > /sys/module/tcp_cubic/parameters/bic_scale", "fail"),  # 0444
    ("echo x > /sys/module/tcp_cubic/parameters/beta", "fail"),
    ("echo 1 > /sys/module/tcp_cubic/parameters/no_such_param", "fail"),
    ("echo 1 > /sys/module/tcp_bbr/parameters/x", "unsupported"),
])
def test_echo_into_a_cubic_module_parameter(command: str, status: str) -> None:
    """``echo V > /sys/module/tcp_cubic/parameters/NAME`` sets the Host's CUBIC
    parameter as sysfs would; a read-only or missing file, or a value that is not an
    integer, makes echo fail; another module's files are unsupported."""
    assert _run(f"0 `{command}`\n" + PASSIVE)[0] == status


def test_cubic_module_parameters_reach_a_new_connection() -> None:
    """A connection opened after the write runs with the written parameters."""
    host = Host("h")
    commands = Commands(host)
    assert commands.run(1, "echo 1 > /sys/module/tcp_cubic/parameters/hystart_detect\n"
                           "echo 8 > /sys/module/tcp_cubic/parameters/hystart_low_window") == 0
    cubic = host.tuning.tcp_cubic
    assert (cubic.hystart_detect, cubic.hystart_low_window, cubic.beta) == (1, 8, 717)
    assert commands.run(1, "echo 3 > /proc/sys/net/ipv4/tcp_recovery") == 0
    assert host.tuning.tcp_recovery == 3


def test_names_a_code_block_assigns_are_there_in_the_next() -> None:
    """packetdrill runs a script's code blocks as one Python file: ``cwnd = 10`` in one
    block is seen (and may change) in the next, while ``tcpi_*`` are fresh each time."""
    tail = ("+0 %{ cwnd = tcpi_snd_cwnd; tcpi_snd_cwnd = 99 }%\n"
            "+0 %{ assert tcpi_snd_cwnd == cwnd == 10, cwnd; cwnd += 1 }%\n"
            "+0 %{ assert cwnd == 11 }%\n")
    assert _run(PASSIVE + tail)[0] == "pass"
    assert _run(PASSIVE + "+0 %{ assert cwnd == 10 }%\n")[0] == "unsupported"
