"""The shape of host-side TCP.  Every call into a connection's engine from the host goes
through ``TcpSock.engine`` or one of its typed siblings (``engine_segment``, ...), each of
which collects what the engine produced (segments, events, counters, the next deadline)
in its ``finally``: a call made around them would leave its segments unsent and its timer
unarmed.  And the layer's parts are objects, not mixins."""

from __future__ import annotations

import ast
from pathlib import Path

import rcunet

#: The engine's entry points that produce output (``rcunet.core.tcp.Connection``).
ENTRY_POINTS = frozenset({
    "on_segment", "on_timer", "send", "recv", "close", "abort", "shutdown_write",
    "disconnect", "update_options", "mtu_reduced", "fail", "expire_fin_wait2",
    "take_segments", "take_events",
})
#: (module, function) allowed to call them: the helper, and what it is handed to call.
#: The helpers: the call, then ``_collect`` in a ``finally``.
ENGINE_HELPERS = ("engine", "engine_segment", "engine_send", "engine_recv", "engine_timer")
ALLOWED = frozenset({
    *(("host/tcp/sock.py", helper) for helper in ENGINE_HELPERS),
    ("host/tcp/sock.py", "_collect"),  # the collection itself (take_segments, take_events)
    ("host/tcp/errq.py", "send_noted"),  # called as TcpSock.engine(send_noted, ...)
})
ROOT = Path(rcunet.__file__).parent


def _is_connection(node: ast.expr) -> bool:
    """``conn`` or ``<anything>.conn``: how the host names a socket's Connection."""
    return (isinstance(node, ast.Name) and node.id == "conn") or (
        isinstance(node, ast.Attribute) and node.attr == "conn")


def _direct_calls(source: str, where: str) -> list[str]:
    tree = ast.parse(source, where)
    found: list[str] = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        if (where, func.name) in ALLOWED:
            continue
        for node in ast.walk(func):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ENTRY_POINTS and _is_connection(node.func.value)):
                found.append(f"{where}:{node.lineno} {func.name}: conn.{node.func.attr}()")
    return found


def test_the_host_calls_the_engine_only_through_tcpsock_engine() -> None:
    paths = sorted([*ROOT.joinpath("host").rglob("*.py"), *ROOT.joinpath("drill").rglob("*.py")])
    offenders = [line for path in paths
                 for line in _direct_calls(path.read_text(), str(path.relative_to(ROOT)))]
    assert offenders == []


def _collects_finally(func: ast.FunctionDef) -> bool:
    """Does ``func`` call ``self._collect`` in the ``finally`` of a ``try``?"""
    for node in ast.walk(func):
        if isinstance(node, ast.Try):
            for stmt in node.finalbody:
                for call in ast.walk(stmt):
                    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)
                            and call.func.attr == "_collect"):
                        return True
    return False


def test_every_engine_helper_collects_in_its_finally() -> None:
    """Whatever the engine call returns or raises, what it produced is collected."""
    tree = ast.parse(ROOT.joinpath("host", "tcp", "sock.py").read_text())
    helpers = {node.name: node for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef) and node.name in ENGINE_HELPERS}
    assert sorted(helpers) == sorted(ENGINE_HELPERS)
    assert [name for name, func in helpers.items() if not _collects_finally(func)] == []


def test_the_check_sees_a_direct_call() -> None:
    """The scan itself: a direct call is found, one handed to the helper is not."""
    source = ("def f(sk, now):\n    sk.conn.on_timer(now)\n"
              "def g(sk, conn, now):\n    sk.engine(conn.on_timer, now)\n")
    assert _direct_calls(source, "probe.py") == ["probe.py:2 f: conn.on_timer()"]


def test_host_tcp_has_no_mixins() -> None:
    """The layer's parts are objects it holds, not mixins of one class: every class in
    rcunet/host/tcp derives from nothing but a table entry, an enum or an exception."""
    allowed_bases = {"SockEntry", "TimeWaitEntry", "Enum", "enum.Enum", "RuntimeError"}
    found = []
    for path in sorted(ROOT.joinpath("host", "tcp").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                bases = {ast.unparse(base) for base in node.bases}
                if bases - allowed_bases or node.name.endswith("Mixin"):
                    found.append(f"{path.name}: {node.name}({', '.join(sorted(bases))})")
    assert found == []
