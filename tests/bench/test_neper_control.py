"""neper's control plane: ``struct hs_msg`` byte for byte against control_plane.c, and a
whole neper exchange (CLI_HELLO, SER_ACK, data, CLI_DONE, SER_BYE) between our client
and ``rcunet up``'s neper service on two in-process rcunet Hosts, for every workload.

The C layout, from google/neper control_plane.c (LP64; the compiler adds no padding
because every field falls on its natural boundary)::

    struct hs_msg {                 offset size
        char secret[32];                 0   32
        int32_t magic;                  32    4
        uint32_t type;                  36    4   CLI_HELLO=1 SER_ACK CLI_DONE SER_BYE
        uint32_t num_threads;           40    4
        uint32_t num_flows;             44    4
        uint32_t test_length;           48    4
        uint32_t client_number;         52    4
        uint64_t max_pacing_rate;       56    8
        uint64_t remote_rate;           64    8
    };                                  72 = sizeof
"""

from __future__ import annotations

import argparse
import re
import socket
import threading
from collections.abc import Iterator

import pytest

from rcunet.bench import control, neper, targets
from rcunet.bench.workloads import ConnectError
from rcunet.host.network import Network
from rcunet.services import start_services

OFFSETS = {"secret": (0, 32), "magic": (32, 4), "type": (36, 4), "num_threads": (40, 4),
           "num_flows": (44, 4), "test_length": (48, 4), "client_number": (52, 4),
           "max_pacing_rate": (56, 8), "remote_rate": (64, 8)}
SIZEOF_HS_MSG = 72


def c_layout(**fields: int | bytes) -> bytes:
    """The bytes a C program writes: each field at its offset, network byte order."""
    raw = bytearray(SIZEOF_HS_MSG)
    for name, value in fields.items():
        offset, size = OFFSETS[name]
        if isinstance(value, bytes):
            raw[offset:offset + len(value)] = value
        else:
            raw[offset:offset + size] = (value % (1 << 8 * size)).to_bytes(size, "big")
    return bytes(raw)


def test_the_layout_covers_72_bytes_without_gaps() -> None:
    assert control.HS_MSG_SIZE == SIZEOF_HS_MSG
    end = 0
    for offset, size in OFFSETS.values():
        assert offset == end and offset % min(size, 8) == 0  # natural alignment
        end = offset + size
    assert end == SIZEOF_HS_MSG


def test_cli_hello_encodes_as_neper_writes_it() -> None:
    hello = control.Hello("tcp_rr", num_threads=2, num_flows=200, test_length=-1000,
                          max_pacing_rate=10_000_000_000, magic=42)
    expected = c_layout(secret=b"neper tcp_rr 201703241250", magic=42, type=1,
                        num_threads=2, num_flows=200, test_length=-1000,
                        max_pacing_rate=10_000_000_000)
    assert hello.message().encode() == expected
    assert expected[48:52] == b"\xff\xff\xfc\x18"  # htonl((uint32_t)-1000)
    assert expected[25:32] == bytes(7)  # the secret is NUL padded


def test_decoding_the_c_bytes_gives_every_field_back() -> None:
    raw = c_layout(secret=b"neper udp_stream 201703241240", magic=-7, type=4,
                   num_threads=3, num_flows=9, test_length=30, client_number=5,
                   max_pacing_rate=1, remote_rate=(1 << 64) - 1)
    msg = control.HsMsg.decode(raw)
    assert msg == control.HsMsg(secret=raw[:32], magic=-7, type=control.SER_BYE,
                                num_threads=3, num_flows=9, test_length=30,
                                client_number=5, max_pacing_rate=1,
                                remote_rate=(1 << 64) - 1)
    assert msg.encode() == raw


def test_every_workload_has_its_mains_secret_and_crr_has_none() -> None:
    # tcp_crr_main.c initialises struct options to {0}: its secret is 32 zero bytes
    assert control.secret_of("tcp_crr") == bytes(32)
    assert control.secret_of("tcp_stream") == b"neper tcp_stream 201703241300".ljust(32, b"\0")
    for workload in neper.WORKLOADS:
        assert control.workload_of(control.secret_of(workload)) == workload
    assert control.workload_of(b"neper tcp_rr 201703241251".ljust(32, b"\0")) is None


def test_a_short_struct_does_not_decode() -> None:
    with pytest.raises(control.ControlError, match="72 bytes, got 71"):
        control.HsMsg.decode(bytes(71))


# ------------------------------------------------------------------------------ exchanges
@pytest.fixture(scope="module")
def hosts() -> Iterator[tuple[object, object]]:
    network = Network(threaded=True)
    client_host, server_host = network.host("a"), network.host("b")
    network.link(client_host, server_host, ["10.0.0.1/24"], ["10.0.0.2/24"], inline_rx=True,
                 mtu=65536)
    network.start()
    try:
        yield client_host, server_host
    finally:
        network.close()


def client_opts(workload: str, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    neper.configure(parser, workload)
    opts = parser.parse_args(["-c", "-H", "10.0.0.2", "--nolog", "--target", "kernel",
                              *argv])
    neper.validate(opts)
    neper.adjust_stream_directions(opts)
    return opts


def run_client(client_host: object, workload: str, *argv: str,
               capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, str]]:
    opts = client_opts(workload, *argv)
    status = targets._run_client(opts, neper.Log(opts), client_host.socket)  # type: ignore[attr-defined]
    out = capsys.readouterr().out
    return status, dict(re.findall(r"^(\w+)=(.*)$", out, re.M))


CASES = [("tcp_rr", ["-l", "-300", "-F", "3", "-T", "2"]),
         ("tcp_crr", ["-l", "-40", "-F", "2"]),
         ("udp_rr", ["-l", "-200", "-F", "2"]),
         ("tcp_stream", ["-l", "1"]),
         ("udp_stream", ["-l", "1"])]


@pytest.mark.parametrize(("workload", "argv"), CASES,
                         ids=[f"{w}{''.join(a[2:])}" for w, a in CASES])
def test_our_client_and_the_neper_service_run_a_whole_exchange(
        hosts: tuple[object, object], workload: str, argv: list[str],
        capsys: pytest.CaptureFixture[str]) -> None:
    client_host, server_host = hosts
    with start_services(server_host, "neper:12866") as services:  # type: ignore[arg-type]
        service = services.services[0]
        status, values = run_client(client_host, workload, *argv, capsys=capsys)
        assert status == 0
        assert service.runs == 1  # type: ignore[attr-defined]
    if workload.endswith("rr"):
        assert values["num_transactions"] == argv[1][1:]
        expected_remote = 0 if workload == "tcp_crr" else None  # crr: no server stats
        if expected_remote is None:
            assert int(values["remote_throughput"]) > 0  # SER_BYE carried the server's
        else:
            assert values["remote_throughput"] == "0"
    else:  # the writer measures nothing; the reading server's bits/s come in SER_BYE
        assert values["local_throughput"] == "0" and int(values["remote_throughput"]) > 0


def _connect(client_host: object) -> socket.socket:
    sock = client_host.socket(socket.AF_INET, socket.SOCK_STREAM)  # type: ignore[attr-defined]
    sock.settimeout(10)
    sock.connect(("10.0.0.2", 12866))
    return sock


@pytest.mark.parametrize("first", [b"GET / HTTP/1.0\r\n\r\n" * 4, bytes(40),
                                   control.HsMsg(secret=b"neper tcp_rr 1999",
                                                 type=1).encode(),
                                   control.HsMsg(secret=control.secret_of("tcp_rr"),
                                                 type=3).encode()],
                         ids=["garbage", "short", "wrong-secret", "wrong-type"])
def test_bad_first_messages_are_counted_and_the_next_client_is_served(
        hosts: tuple[object, object], first: bytes,
        capsys: pytest.CaptureFixture[str]) -> None:
    client_host, server_host = hosts
    with start_services(server_host, "neper:12866") as services:  # type: ignore[arg-type]
        service = services.services[0]
        with _connect(client_host) as bad:
            bad.sendall(first)
            if len(first) < control.HS_MSG_SIZE:
                bad.shutdown(socket.SHUT_WR)  # a short struct, then EOF
            assert bad.recv(100) == b""  # closed without SER_ACK
        status, values = run_client(client_host, "tcp_rr", "-l", "-20", capsys=capsys)
        assert status == 0 and values["num_transactions"] == "20"
        assert service.invalid_secrets == 1 and service.runs == 1  # type: ignore[attr-defined]


def test_a_client_vanishing_mid_run_is_abandoned_and_its_ports_freed(
        hosts: tuple[object, object], capsys: pytest.CaptureFixture[str]) -> None:
    client_host, server_host = hosts
    with start_services(server_host, "neper:12866") as services:  # type: ignore[arg-type]
        service = services.services[0]
        before = {t.name for t in threading.enumerate()}
        with _connect(client_host) as ctl:
            ctl.sendall(control.Hello("tcp_rr", 1, 1, 10).message().encode())
            ack = control.HsMsg.decode(control.recv_msg(ctl))
            assert ack.type == control.SER_ACK and ack.magic == 42
            flow = client_host.socket(socket.AF_INET, socket.SOCK_STREAM)  # type: ignore[attr-defined]
            flow.connect(("10.0.0.2", 12867))
            flow.sendall(b"x")
            assert flow.recv(1) == bytes(1)
        # control connection closed mid-run: the service stops the run
        flow.close()
        for _ in range(200):
            if service.abandoned == 1:  # type: ignore[attr-defined]
                break
            threading.Event().wait(0.05)
        assert service.abandoned == 1  # type: ignore[attr-defined]
        status, values = run_client(client_host, "tcp_rr", "-l", "-10", capsys=capsys)
        assert status == 0 and values["num_transactions"] == "10"  # port 12867 is free again
    leftover = {t.name for t in threading.enumerate()} - before
    assert not [name for name in leftover if name.startswith("neper-")]


def test_a_magic_mismatch_is_reported_by_the_client(
        hosts: tuple[object, object], capsys: pytest.CaptureFixture[str]) -> None:
    client_host, server_host = hosts
    with start_services(server_host, "neper:12866"):  # type: ignore[arg-type]
        opts = client_opts("udp_rr", "-l", "-5", "--magic", "7")
        with pytest.raises(neper.NeperError, match="the server's magic is 42, ours 7"):
            targets._run_client(opts, neper.Log(opts), client_host.socket)  # type: ignore[attr-defined]


def test_more_data_ports_than_the_server_opened_is_one_clear_error(
        hosts: tuple[object, object], capsys: pytest.CaptureFixture[str]) -> None:
    # --num-ports is not in hs_msg: as with neper, both sides must be given it
    client_host, server_host = hosts
    with start_services(server_host, "neper:12866"):  # type: ignore[arg-type]
        opts = client_opts("tcp_rr", "-l", "-5", "-F", "2", "--num-ports", "2")
        with pytest.raises(ConnectError, match="port 12868: connection refused"):
            targets._run_client(opts, neper.Log(opts), client_host.socket)  # type: ignore[attr-defined]


# ------------------------------------------------------------------------------ server flags
def test_server_flags_set_threads_ports_sizes_and_magic(
        hosts: tuple[object, object], capsys: pytest.CaptureFixture[str]) -> None:
    # rcunet up --serve neper:12866 --neper '-T 2 --num-ports 2 -R 3 --magic 7 -P 13000'
    client_host, server_host = hosts
    flags = {"neper": "-T 2 --num-ports 2 -R 3 --magic 7 -P 13000"}
    with start_services(server_host, "neper:12866", flags) as services:  # type: ignore[arg-type]
        service = services.services[0]
        status, values = run_client(client_host, "tcp_rr", "-l", "-40", "-F", "2", "-R", "3",
                                    "--num-ports", "2", "--magic", "7", "-P", "13000",
                                    capsys=capsys)
        assert status == 0 and values["num_transactions"] == "40"
        assert service.runs == 1  # type: ignore[attr-defined]
        # SER_ACK carries the server's own -T
        with _connect(client_host) as ctl:
            ctl.sendall(control.Hello("tcp_rr", 1, 1, 10, magic=7).message().encode())
            ack = control.HsMsg.decode(control.recv_msg(ctl))
            assert (ack.type, ack.magic, ack.num_threads) == (control.SER_ACK, 7, 2)


def test_the_servers_magic_mismatch_is_one_line_on_the_client(
        hosts: tuple[object, object], capsys: pytest.CaptureFixture[str]) -> None:
    client_host, server_host = hosts
    with start_services(server_host, "neper:12866", {"neper": "--magic 7"}):  # type: ignore[arg-type]
        opts = client_opts("tcp_rr", "-l", "-5")
        with pytest.raises(neper.NeperError, match="the server's magic is 7, ours 42"):
            targets._run_client(opts, neper.Log(opts), client_host.socket)  # type: ignore[attr-defined]


def test_a_flag_applies_to_the_workloads_that_have_it(
        hosts: tuple[object, object], capsys: pytest.CaptureFixture[str]) -> None:
    # -M (tcp_stream only): the server writes and the client reads; udp_rr ignores it
    client_host, server_host = hosts
    with start_services(server_host, "neper:12866", {"neper": "-M"}):  # type: ignore[arg-type]
        status, values = run_client(client_host, "tcp_stream", "-l", "1", "-M",
                                    capsys=capsys)
        assert status == 0 and int(values["local_throughput"]) > 0  # the client read
        status, values = run_client(client_host, "udp_rr", "-l", "-10", capsys=capsys)
        assert status == 0 and values["num_transactions"] == "10"


@pytest.mark.parametrize(("flags", "message"), [
    ("--bogus 3", "no neper server takes --bogus"),
    ("-T 0", "There must be at least 1 thread"),
    ("-c", "-c: a server's flags"),
    ("-H 10.0.0.9", "-H: rcunet up serves on its --address"),
    ("-C 1234", "the control port is --serve neper:PORT"),
    ("-Q x", "invalid int value"),
    ("'-T 2", "No closing quotation"),
])
def test_bad_server_flags_are_one_error_and_start_nothing(
        hosts: tuple[object, object], flags: str, message: str) -> None:
    _client_host, server_host = hosts
    with pytest.raises(ValueError, match=re.escape(message)):
        start_services(server_host, "http:80,neper:12866", {"neper": flags})  # type: ignore[arg-type]
    with start_services(server_host, "http:80,neper:12866"):  # type: ignore[arg-type]
        pass  # nothing was left bound


def test_flags_for_a_service_not_served_are_refused() -> None:
    from rcunet.services import check_flags, parse_specs

    with pytest.raises(ValueError, match="--serve has no neper:PORT"):
        check_flags(parse_specs("http:80"), {"neper": "-T 2"})
    with pytest.raises(ValueError, match="http takes no flags"):
        check_flags(parse_specs("http:80"), {"http": "-x"})


def test_rcunet_up_refuses_neper_flags_without_neper_in_one_line(
        capsys: pytest.CaptureFixture[str]) -> None:
    from rcunet.cli import main

    status = main(["up", "--tap", "nepx0", "--address", "10.9.0.1/24", "--serve",
                   "http:80", "--neper", "-T 2"])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "--serve has no neper:PORT" in err
