"""neper's control plane (google/neper control_plane.c), on any socket factory.

One TCP control connection per client on ``-C`` (12866) carries four fixed-size
``struct hs_msg`` messages, every number in network byte order::

    CLI --> SER : CLI_HELLO  secret (test name and version), -T, -F, -l, -m
    CLI <-- SER : SER_ACK    the server's -T, -F, -l
         <data transfer on -P (12867) and up>
    CLI --> SER : CLI_DONE   the client's local_throughput; then shutdown(SHUT_WR)
    CLI <-- SER : SER_BYE    the server's local_throughput

The layout (x86-64 and every LP64 ABI; no padding, ``max_pacing_rate`` falls on an
8-byte boundary)::

    offset size field
         0   32 char     secret[32]     "neper tcp_rr 201703241250", NUL padded
        32    4 int32_t  magic          --magic (42)
        36    4 uint32_t type           CLI_HELLO=1 SER_ACK=2 CLI_DONE=3 SER_BYE=4
        40    4 uint32_t num_threads
        44    4 uint32_t num_flows      client only
        48    4 uint32_t test_length    client only; htonl() of a signed int
        52    4 uint32_t client_number  server only (neper leaves it 0)
        56    8 uint64_t max_pacing_rate  client only
        64    8 uint64_t remote_rate    bits/s (stream) or transactions/s (RR)
        72      sizeof(struct hs_msg)

What each side checks is what neper checks:

* the server compares the whole 32-byte secret and the type of the first message (not
  the magic); a mismatch is an *incident* (``invalid_secret_count``), the connection
  is closed and the server waits for the next client;
* every later message must be exactly 72 bytes with the expected magic and type
  (neper's ``recv_msg``); the client fails on a bad SER_ACK, the server abandons a
  client whose CLI_DONE is bad or missing.

tcp_crr's secret is all zeros: its ``main`` initialises ``struct options`` to ``{0}``.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

CLI_HELLO, SER_ACK, CLI_DONE, SER_BYE = 1, 2, 3, 4
TYPE_NAMES = {CLI_HELLO: "CLI_HELLO", SER_ACK: "SER_ACK", CLI_DONE: "CLI_DONE",
              SER_BYE: "SER_BYE"}
DEFAULT_MAGIC = 42
SECRET_SIZE = 32
HS_MSG = struct.Struct("!32si5I2Q")
HS_MSG_SIZE = HS_MSG.size  # 72

#: ``struct options .secret`` of each workload's ``*_main.c`` (neper 1.1.0).
SECRETS: dict[str, bytes] = {
    "tcp_rr": b"neper tcp_rr 201703241250",
    "tcp_crr": b"",
    "tcp_stream": b"neper tcp_stream 201703241300",
    "udp_rr": b"neper udp_rr 201703241230",
    "udp_stream": b"neper udp_stream 201703241240",
}


def secret_of(workload: str) -> bytes:
    return SECRETS[workload].ljust(SECRET_SIZE, b"\0")


def workload_of(secret: bytes) -> str | None:
    """The workload whose secret is exactly ``secret`` (32 bytes), or None."""
    for workload in SECRETS:
        if secret_of(workload) == secret:
            return workload
    return None


class ControlError(Exception):
    """The control connection broke a rule of neper's protocol (message ready to print)."""


@dataclass(frozen=True)
class HsMsg:
    """``struct hs_msg`` in host terms (``test_length`` signed, as neper's int)."""

    secret: bytes = bytes(SECRET_SIZE)
    magic: int = DEFAULT_MAGIC
    type: int = 0
    num_threads: int = 0
    num_flows: int = 0
    test_length: int = 0
    client_number: int = 0
    max_pacing_rate: int = 0
    remote_rate: int = 0

    def encode(self) -> bytes:
        if len(self.secret) > SECRET_SIZE:
            raise ValueError(f"secret is {len(self.secret)} bytes, at most {SECRET_SIZE}")
        return HS_MSG.pack(self.secret.ljust(SECRET_SIZE, b"\0"), self.magic, self.type,
                           self.num_threads, self.num_flows,
                           self.test_length & 0xFFFFFFFF, self.client_number,
                           self.max_pacing_rate, self.remote_rate)

    @classmethod
    def decode(cls, data: bytes) -> HsMsg:
        if len(data) != HS_MSG_SIZE:
            raise ControlError(f"hs_msg is {HS_MSG_SIZE} bytes, got {len(data)}")
        (secret, magic, kind, threads, flows, length, number, pacing,
         rate) = HS_MSG.unpack(data)
        if length >= 1 << 31:
            length -= 1 << 32
        return cls(secret, magic, kind, threads, flows, length, number, pacing, rate)


def recv_msg(sock: Any) -> bytes:
    """Up to 72 bytes: one message, or fewer when the peer closed (a short struct)."""
    data = b""
    while len(data) < HS_MSG_SIZE:
        chunk = sock.recv(HS_MSG_SIZE - len(data))
        if not chunk:
            break
        data += chunk
    return data


def expect(sock: Any, magic: int, kind: int) -> HsMsg:
    """neper's recv_msg: exactly one hs_msg with our magic and the expected type."""
    data = recv_msg(sock)
    if len(data) != HS_MSG_SIZE:
        raise ControlError(f"read want {HS_MSG_SIZE} bytes of {TYPE_NAMES[kind]}, "
                           f"have {len(data)}")
    msg = HsMsg.decode(data)
    if msg.magic != magic:
        raise ControlError(f"{TYPE_NAMES[kind]} has magic {msg.magic}, ours is {magic} "
                           "(--magic differs)")
    if msg.type != kind:
        raise ControlError(f"expected {TYPE_NAMES[kind]}, got type {msg.type}")
    return msg


# ------------------------------------------------------------------------------ client
@dataclass(frozen=True)
class Hello:
    workload: str
    num_threads: int
    num_flows: int
    test_length: int
    max_pacing_rate: int = 0
    magic: int = DEFAULT_MAGIC

    def message(self) -> HsMsg:
        return HsMsg(secret_of(self.workload), self.magic, CLI_HELLO, self.num_threads,
                     self.num_flows, self.test_length, 0, self.max_pacing_rate)


def client_hello(sock: Any, hello: Hello) -> HsMsg:
    """Send CLI_HELLO and return the server's SER_ACK.  A server of another workload or
    neper version closes without answering (it counts an invalid secret)."""
    sock.sendall(hello.message().encode())
    data = recv_msg(sock)
    if not data:
        raise ControlError(f"the server closed the control connection without SER_ACK: "
                           f"it does not run {hello.workload} (neper compares the test "
                           "name and version; the server counted an invalid secret)")
    if len(data) != HS_MSG_SIZE:
        raise ControlError(f"SER_ACK: read want {HS_MSG_SIZE} bytes, have {len(data)}")
    ack = HsMsg.decode(data)
    if ack.magic != hello.magic:
        raise ControlError(f"the server's magic is {ack.magic}, ours {hello.magic} "
                           "(--magic must match on both sides)")
    if ack.type != SER_ACK:
        raise ControlError(f"expected SER_ACK, got type {ack.type}")
    return ack


def client_done(sock: Any, magic: int, local_rate: int) -> int:
    """Send CLI_DONE with our throughput, shut the write side, return SER_BYE's rate."""
    sock.sendall(HsMsg(magic=magic, type=CLI_DONE, remote_rate=local_rate).encode())
    try:
        sock.shutdown(1)  # SHUT_WR, as neper's ctrl_notify_server
    except OSError:
        pass
    return expect(sock, magic, SER_BYE).remote_rate


# ------------------------------------------------------------------------------ server
@dataclass(frozen=True)
class ServerSide:
    """What the server's SER_ACK says about itself (its own -T, -F, -l)."""

    num_threads: int
    num_flows: int
    test_length: int
    magic: int = DEFAULT_MAGIC


def read_hello(sock: Any, workloads: tuple[str, ...]) -> tuple[str, HsMsg]:
    """The first message: a CLI_HELLO whose secret is one of ``workloads``'.  Anything
    else (garbage, a short struct, another test's secret) raises ControlError: the
    caller counts it as neper counts an invalid secret, closes and goes on."""
    data = recv_msg(sock)
    if len(data) != HS_MSG_SIZE:
        raise ControlError(f"invalid secret: a first message of {len(data)} bytes, "
                           f"not {HS_MSG_SIZE}")
    msg = HsMsg.decode(data)
    workload = workload_of(msg.secret)
    if workload not in workloads or msg.type != CLI_HELLO:
        raise ControlError(f"invalid secret {msg.secret.rstrip(bytes(1))!r} type {msg.type}")
    return workload, msg


def send_ack(sock: Any, side: ServerSide) -> None:
    sock.sendall(HsMsg(magic=side.magic, type=SER_ACK, num_threads=side.num_threads,
                       num_flows=side.num_flows, test_length=side.test_length).encode())


def wait_done(sock: Any, magic: int) -> int | None:
    """The client's CLI_DONE rate, or None when it sent something else or vanished
    (neper: "Abandoning client")."""
    try:
        return expect(sock, magic, CLI_DONE).remote_rate
    except (ControlError, OSError):
        return None


def send_bye(sock: Any, magic: int, local_rate: int) -> None:
    sock.sendall(HsMsg(magic=magic, type=SER_BYE, remote_rate=local_rate).encode())

