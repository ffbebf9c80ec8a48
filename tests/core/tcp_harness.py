"""Test helpers: segment templates, a hand-driven engine fixture and a seeded two-engine wire.

Virtual time only: nothing here reads a clock.  The wire's impairments come from
``random.Random(seed)``, so every run with the same seed is the same run.
"""

from __future__ import annotations

import hashlib
import heapq
import random
from dataclasses import dataclass, field

from rcunet.core.tcp import Connection, Options, listen_action
from rcunet.core.tcp.connection import ListenAction, reset_for
from rcunet.wire import tcp

MS = 1_000_000
SECOND = 1_000_000_000
LOCAL_PORT, REMOTE_PORT = 80, 49152
ISS_LOCAL, ISS_REMOTE = 10_000, 20_000
ACK, SYN, FIN, RST, PSH = tcp.ACK, tcp.SYN, tcp.FIN, tcp.RST, tcp.PSH


def seg(**fields: object) -> tcp.Repr:
    """A segment from the remote peer to the engine under test; override any field."""
    base: dict[str, object] = dict(src_port=REMOTE_PORT, dst_port=LOCAL_PORT, seq=ISS_REMOTE + 1,
                                   ack=ISS_LOCAL + 1, flags=ACK, window=65535)
    base.update(fields)
    return tcp.Repr(**base)  # type: ignore[arg-type]


def send(conn: Connection, segment: tcp.Repr, now: int = 0) -> list[tcp.Repr]:
    """Feed one segment and return what the engine emitted."""
    conn.on_segment(segment, now)
    return conn.take_segments()


def recv_one(conn: Connection) -> tcp.Repr:
    __tracebackhide__ = True
    out = conn.take_segments()
    assert len(out) == 1, f"expected one segment, got {out}"
    return out[0]


def recv_nothing(conn: Connection) -> None:
    __tracebackhide__ = True
    out = conn.take_segments()
    assert out == [], f"expected no segment, got {out}"


def plain_options(**kw: object) -> Options:
    """Options without timestamps/SACK/scaling unless asked: exact numbers in unit tests."""
    base: dict[str, object] = dict(timestamps=False, sack=False, window_scaling=False,
                                   rcvbuf=2 * 65535, sndbuf=65536, mss=1460)
    base.update(kw)
    return Options(**base)  # type: ignore[arg-type]


def established(options: Options | None = None, *, peer_mss: int = 1460, now: int = 0,
                peer_window: int = 65535, quickacks_spent: bool = False) -> Connection:
    """A passive connection taken through the handshake: ESTABLISHED, nothing pending.

    ``quickacks_spent``: as if many segments had been received already, so the delayed-ACK
    rules of a connection past its start apply (``spend_quickacks``).
    """
    opts = options or plain_options()
    syn = seg(seq=ISS_REMOTE, ack=0, flags=SYN, mss=peer_mss,
              window_scale=0 if opts.window_scaling else None,
              sack_permitted=opts.sack,
              timestamp=(1000, 0) if opts.timestamps else None)
    conn = Connection.accept_syn(syn, iss=ISS_LOCAL, now=now, options=opts)
    conn.take_segments()
    ts = (1001, conn.tcb.ts_offset + now // MS) if opts.timestamps else None
    conn.on_segment(seg(window=peer_window, timestamp=ts), now)
    conn.take_segments()
    conn.take_events()
    if quickacks_spent:
        spend_quickacks(conn)
    return conn


def spend_quickacks(conn: Connection) -> None:
    """Leave quick-ack mode the way 16 ACKed segments would (Linux tcp_dec_quickack_mode:
    no quick ACKs left, ato at its floor): a new connection ACKs its first segments one by
    one (tcp_incr_quickack), and tests of the delayed-ACK rules start past that."""
    conn.delack.leave_quickack_mode(conn.options, conn._now)


# ------------------------------------------------------------------ the wire
@dataclass
class Impairments:
    loss: float = 0.0
    dup: float = 0.0
    reorder: float = 0.0  #: probability of an extra random delay up to ``reorder_delay``
    reorder_delay: int = 30 * MS
    corrupt: float = 0.0


@dataclass(order=True)
class _InFlight:
    at: int
    n: int
    to: str = field(compare=False)
    segment: tcp.Repr = field(compare=False)


class Net:
    """Two engines back to back: ``client`` connects, ``server`` is accepted from its SYN."""

    def __init__(self, *, seed: int = 0, delay: int = 10 * MS, imp: Impairments | None = None,
                 client_opts: Options | None = None, server_opts: Options | None = None,
                 start: bool = True, client_iss: int = ISS_REMOTE, server_iss: int = ISS_LOCAL,
                 client_ts_offset: int = 777, server_ts_offset: int = 99_999) -> None:
        self.now = 0
        self.delay = delay
        self.imp = imp or Impairments()
        self.rng = random.Random(seed)
        self.client_opts = client_opts or Options()
        self.server_opts = server_opts or Options()
        self._heap: list[_InFlight] = []
        self._n = 0
        self.log: list[tuple[int, str, tcp.Repr]] = []
        self.drop_filter = None  # callable(to, seg) -> bool, for hand-picked losses
        self.server: Connection | None = None
        self.client_events: list[object] = []
        self.server_events: list[object] = []
        self.server_iss = server_iss
        self.server_ts_offset = server_ts_offset
        self.client = Connection.connect(local_port=REMOTE_PORT, remote_port=LOCAL_PORT,
                                         iss=client_iss, now=0, options=self.client_opts,
                                         ts_offset=client_ts_offset)
        if start:
            self.flush()

    # -- moving segments
    def flush(self) -> None:
        for conn, to, events in ((self.client, "server", self.client_events),
                                 (self.server, "client", self.server_events)):
            if conn is None:
                continue
            for s in conn.take_segments():
                self._transmit(to, s)
            events.extend(conn.take_events())

    def _transmit(self, to: str, s: tcp.Repr) -> None:
        self.log.append((self.now, to, s))
        if self.drop_filter is not None and self.drop_filter(to, s):
            return
        imp, rng = self.imp, self.rng
        if imp.loss and rng.random() < imp.loss:
            return
        copies = 2 if imp.dup and rng.random() < imp.dup else 1
        for _ in range(copies):
            out = s
            if imp.corrupt and rng.random() < imp.corrupt:
                out = s._replace(checksum_ok=False)  # what a checksum-verifying parse reports
            at = self.now + self.delay
            if imp.reorder and rng.random() < imp.reorder:
                at += rng.randrange(imp.reorder_delay)
            self._n += 1
            heapq.heappush(self._heap, _InFlight(at, self._n, to, out))

    def _deliver(self, item: _InFlight) -> None:
        s = item.segment
        if item.to == "client":
            self.client.on_segment(s, self.now)
        elif self.server is None:
            action = listen_action(s)
            if action is ListenAction.SYN:
                self.server = Connection.accept_syn(s, iss=self.server_iss, now=self.now,
                                                    options=self.server_opts,
                                                    ts_offset=self.server_ts_offset)
            elif action is ListenAction.RESET and s.checksum_ok is not False:
                reply = reset_for(s)
                if reply is not None:
                    self._transmit("client", reply)
        else:
            self.server.on_segment(s, self.now)
        self.flush()

    def next_time(self) -> int | None:
        times = [self._heap[0].at] if self._heap else []
        for conn in (self.client, self.server):
            if conn is not None and (d := conn.next_deadline()) is not None:
                times.append(d)
        return min(times) if times else None

    def step(self) -> bool:
        """Advance to the next packet or deadline and process it; False when idle."""
        at = self.next_time()
        if at is None:
            return False
        self.now = max(self.now, at)
        if self._heap and self._heap[0].at <= self.now:
            self._deliver(heapq.heappop(self._heap))
            return True
        for conn in (self.client, self.server):
            if conn is not None and (d := conn.next_deadline()) is not None and d <= self.now:
                conn.on_timer(self.now)
        self.flush()
        return True

    def run(self, until: int | None = None, max_steps: int = 1_000_000, stop=None) -> None:
        for _ in range(max_steps):
            if stop is not None and stop():
                return
            at = self.next_time()
            if at is None or (until is not None and at > until):
                if until is not None:
                    self.now = max(self.now, until)
                return
            self.step()
        raise AssertionError("run() did not settle")


def transfer(net: Net, data: bytes, *, chunk: int = 65536, timeout: int = 600 * SECOND,
             read_chunk: int = 1 << 20) -> bytes:
    """Client sends ``data`` then shuts down; server reads to EOF.  Returns what it read."""
    received = bytearray()
    sent = 0
    shut = False
    eof = False
    deadline = net.now + timeout
    for _ in range(5_000_000):
        c = net.client
        if c.state.synchronized and not shut:
            while sent < len(data):
                n = c.send(data[sent : sent + chunk], net.now)
                if not n:
                    break
                sent += n
            if sent == len(data):
                c.shutdown_write(net.now)
                shut = True
            net.flush()
        srv = net.server
        if srv is not None and srv.readable:
            received += srv.recv(read_chunk, net.now)
            net.flush()
        if srv is not None and srv.at_eof:
            eof = True
            break
        if srv is not None and srv.readable:
            continue  # the application still has bytes to read before the network matters
        if net.now > deadline or not net.step():
            break
    assert eof, f"no EOF: sent {sent}/{len(data)}, received {len(received)}, " \
                f"client {net.client.state}, server {net.server and net.server.state}"
    return bytes(received)


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()
