"""The engine's structure: typed parts the Connection holds, each the only writer of its own
fields, none holding the Connection -- so a connection is freed by its reference count, not
left to the cycle collector (two are built per tcp_crr transaction)."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

from tcp_harness import ISS_REMOTE, Net, established, plain_options, seg, transfer

import rcunet.core.tcp as tcp_pkg
from rcunet.core.tcp import Connection

TCP_DIR = Path(tcp_pkg.__file__).parent

#: Each part attribute of Connection, and the module that may assign its fields.
PARTS = {
    "sender": "sender.py",
    "receiver": "receiver.py",
    "loss": "recovery.py",
    "delack": "delack.py",
    "autotune": "autotune.py",
    "challenges": "challenge.py",
    "ecn": "ecnstate.py",
}


def _reaches(start: object, target: object, limit: int = 20_000) -> bool:
    """Is ``target`` among the objects reachable from ``start`` (gc.get_referents)?"""
    seen = {id(start)}
    todo = list(gc.get_referents(start))
    while todo and len(seen) < limit:
        obj = todo.pop()
        if obj is target:
            return True
        if id(obj) in seen or isinstance(obj, type):
            continue
        seen.add(id(obj))
        todo.extend(gc.get_referents(obj))
    return False


def test_connection_has_no_mixins() -> None:
    assert Connection.__mro__ == (Connection, object)


def test_no_part_refers_back_to_its_connection() -> None:
    """After a whole exchange (handshake, data both ways, close), nothing a connection
    holds leads back to it: no cycle."""
    net = Net(seed=1)
    assert transfer(net, b"x" * 200_000) == b"x" * 200_000
    for conn in (net.client, net.server):
        assert conn is not None
        for name in ("tcb", "timers", "rto", "cc", "options", *PARTS):
            assert not _reaches(getattr(conn, name), conn), name


def _assigned_part_fields(tree: ast.AST) -> list[tuple[str, str, int]]:
    """(part, field, line) for each ``<x>.<part>.<field> = ...`` (or ``+=``) in ``tree``."""
    found = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for t in (target.elts if isinstance(target, ast.Tuple) else [target]):
                if (isinstance(t, ast.Attribute) and isinstance(t.value, ast.Attribute)
                        and t.value.attr in PARTS):
                    found.append((t.value.attr, t.attr, t.lineno))
    return found


def test_each_part_is_the_only_writer_of_its_fields() -> None:
    """No module of the engine stores into another part's fields; it calls the part."""
    offenders = []
    for path in sorted(TCP_DIR.glob("*.py")):
        for part, field, line in _assigned_part_fields(ast.parse(path.read_text())):
            if path.name != PARTS[part]:
                offenders.append(f"{path.name}:{line}: {part}.{field}")
    assert offenders == []


def _write_seq_holds(conn: Connection) -> bool:
    """The sender's write_seq field is what it stands for: the first unacknowledged data
    byte plus every byte queued (Linux tp->write_seq)."""
    sender = conn.sender
    return sender.write_seq == (sender.tx_seq + len(sender.tx)) & 0xFFFFFFFF


def test_write_seq_follows_writes_acks_and_discard() -> None:
    """write_seq is a field the writes move (it is read on every output pass): it agrees
    with the send queue after a write the send buffer cuts short, after partial and whole
    ACKs, and after an abort discards the queue."""
    conn = established(plain_options(sndbuf=4096), peer_window=65535)
    start = conn.sender.write_seq
    # the first skb takes size_goal bytes whatever the buffer; no second one fits
    taken = conn.send(b"a" * 100_000, 0)
    assert 0 < taken < 100_000
    assert conn.sender.write_seq == (start + taken) & 0xFFFFFFFF
    assert _write_seq_holds(conn)
    conn.take_segments()
    conn.on_segment(seg(seq=ISS_REMOTE + 1, ack=(start + 1000) & 0xFFFFFFFF), 1)
    assert _write_seq_holds(conn) and conn.sender.write_seq == (start + taken) & 0xFFFFFFFF
    for _ in range(100):  # each ACK lets the rest of the skb out
        conn.on_segment(seg(seq=ISS_REMOTE + 1, ack=conn.tcb.snd_max), 2)
        assert _write_seq_holds(conn)
        if not conn.sender.tx:
            break
    assert len(conn.sender.tx) == 0
    assert conn.send(b"b" * 100, 3) == 100
    assert _write_seq_holds(conn)
    conn.abort(4)
    assert len(conn.sender.tx) == 0 and _write_seq_holds(conn)
