"""lockdep-lite: lock-order checking by lock class, as the kernel's lockdep does it.

With ``enable()`` every ``rcunet.sync.lock.Lock`` records, per thread, the stack of locks it
holds.  Acquiring class B while holding class A adds the dependency A -> B to a global
graph.  Reported (text in ``reports()``, kernel wording):

* **circular dependency**: acquiring B while holding A when B -> ... -> A is already known
  (the classic AB-BA reversal, and longer cycles);
* **declared-order violation**: acquiring B while holding A when ``declare_order`` put B
  before A (checked even before the reverse order has ever been seen);
* **recursive locking**: holding two instances of one class that was not created with
  ``nests_with_self=True``.

Re-acquiring the *same* lock instance with a blocking acquire would deadlock for certain;
that raises ``OSError(EDEADLK)`` (as an error-checking pthread mutex does) in addition to
the report, so the test fails instead of hanging.  Non-blocking acquires (trylock) cannot
deadlock and add no dependency, as in the kernel.

The test suite turns lockdep on for every test and fails a test that produced reports
(``tests/conftest.py``).
"""

from __future__ import annotations

import errno
import threading
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rcunet.sync.lock import Lock, LockClass


class _Held:
    """One lock a thread holds, where it took it.  Compared by identity (``list.remove``
    in ``pop`` removes this very entry).  A plain class, not a NamedTuple: compiled, a
    NamedTuple's annotations are evaluated at import, and Lock is imported for types only."""

    __slots__ = ("lock", "lock_class", "site")

    def __init__(self, lock: Lock, lock_class: LockClass, site: str) -> None:
        self.lock = lock
        self.lock_class = lock_class
        self.site = site


_graph_lock = threading.Lock()
#: class key -> {later class key: "A at site -> B at site" where first seen}.
#: rcu-ish: the inner dicts only grow, under _graph_lock; the fast path reads them without
#: it (atomic: dict get / ``in`` on a dict).
_after: dict[int, dict[int, str]] = {}
_names: dict[int, str] = {}  # guarded-by: _graph_lock
_declared: dict[str, set[str]] = {}  # name -> names declared after it; guarded-by: _graph_lock
_declared_chains: list[tuple[str, ...]] = []  # guarded-by: _graph_lock
_reports: list[str] = []  # guarded-by: _graph_lock
_reported: set[tuple[str, int, int]] = set()  # guarded-by: _graph_lock
_tls = threading.local()
#: Bumped by enable()/disable() under _graph_lock (stale held stacks are dropped);
#: read without it by _stack() (atomic: one global load).
_generation = 0


#: The lock module's checks switch and its reading, installed by ``rcunet.sync.lock``
#: when it loads (``install_switch``).  lock calls into lockdep on every instrumented
#: acquire; lockdep reaches back only through these, so neither module imports the
#: other's upper half (no import circle).  Written once at lock's import; read with
#: one global load.
_switch: Callable[[bool], None] | None = None
_query: Callable[[], bool] | None = None
#: What enable()/disable() asked before the lock module was loaded (None: nothing).
_pending: bool | None = None


def install_switch(switch: Callable[[bool], None], query: Callable[[], bool]) -> None:
    """Called once by ``rcunet.sync.lock``: how to turn every lock's checks on or off."""
    global _switch, _query
    _switch, _query = switch, query
    if _pending is not None:
        switch(_pending)


def _set_checks(on: bool) -> None:
    global _pending
    if _switch is None:
        _pending = on  # no lock exists yet: applied when the lock module loads
    else:
        _switch(on)


def enable() -> None:
    """Turn lock-order checking (and ``assert_held``) on for every lock."""
    global _generation
    with _graph_lock:
        _generation += 1
    _set_checks(True)


def disable() -> None:
    global _generation
    _set_checks(False)
    with _graph_lock:
        _generation += 1


def enabled() -> bool:
    return _query() if _query is not None else bool(_pending)


def reports() -> list[str]:
    """Every report since the last ``clear()``."""
    with _graph_lock:
        return list(_reports)


def clear() -> None:
    """Forget the reports (the dependency graph and declared orders stay)."""
    with _graph_lock:
        _reports.clear()
        _reported.clear()


def declare_order(*class_names: str) -> None:
    """Document an intended order (outer first); acquiring against it is reported."""
    if len(class_names) < 2:
        raise ValueError("declare_order needs at least two class names")
    if len(set(class_names)) != len(class_names):
        raise ValueError(f"a class appears twice in {class_names}")
    with _graph_lock:
        for i, outer in enumerate(class_names):
            _declared.setdefault(outer, set()).update(class_names[i + 1 :])
        _declared_chains.append(tuple(class_names))


def declared_orders() -> list[tuple[str, ...]]:
    with _graph_lock:
        return list(_declared_chains)


def held_classes() -> list[str]:
    """Names of the lock classes the calling thread holds, outermost first."""
    return [held.lock_class.display_name for held in _stack()]


# -- called by Lock's instrumented path ---------------------------------------------------


def _stack() -> list[_Held]:
    stack: list[_Held] | None = getattr(_tls, "stack", None)
    if stack is None or getattr(_tls, "generation", None) != _generation:
        stack = []
        _tls.stack = stack  # owner: this thread's held stack
        _tls.generation = _generation
    return stack


def _site(frame: FrameType) -> str:
    return f"{frame.f_code.co_qualname}:{frame.f_lineno}"


def check_acquire(lock: Lock, frame: FrameType) -> None:
    """Check a blocking acquisition of ``lock`` against the locks this thread holds."""
    stack = _stack()
    if not stack:
        return
    cls = lock.lock_class
    for held in stack:
        if held.lock is lock:
            _report_recursive(held, cls, _site(frame), same_instance=True)
            raise OSError(
                errno.EDEADLK,
                f"{cls.display_name} acquired again by the thread that holds it "
                f"(at {_site(frame)}; first taken at {held.site})",
            )
        outer = held.lock_class
        if outer is cls:
            if not cls.nests_with_self:
                _report_recursive(held, cls, _site(frame), same_instance=False)
            continue
        known = _after.get(outer.key)  # atomic: dict get
        if known is not None and cls.key in known:  # atomic: dict membership
            continue  # dependency already validated
        _add_dependency(held, cls, _site(frame))


def push(lock: Lock, frame: FrameType) -> None:
    stack = _stack()
    stack.append(_Held(lock, lock.lock_class, _site(frame)))
    lock._held_in = stack


def pop(lock: Lock) -> None:
    """Drop ``lock`` from the stack of the thread that took it (may be another thread)."""
    stack = lock._held_in
    lock._held_in = None
    if stack is None:
        return
    # Search a copy (the owner may be pushing/popping concurrently after a cross-thread
    # release), then remove that very entry: list.remove is atomic; _Held compares the lock
    # by identity, so only this lock's entry can match.
    for held in reversed(stack.copy()):
        if held.lock is lock:
            try:
                stack.remove(held)
            except ValueError:
                pass
            return


# -- graph ------------------------------------------------------------------------------


def _add_dependency(held: _Held, cls: LockClass, site: str) -> None:
    outer = held.lock_class
    with _graph_lock:
        _names[outer.key] = outer.display_name
        _names[cls.key] = cls.display_name
        declared = _declared_path(cls.name, outer.name)
        if declared is not None:
            _report_declared(held, cls, site, declared)
            return
        chain = _path(cls.key, outer.key)
        if chain is not None:
            _report_circular(held, cls, site, chain)
            return
        _after.setdefault(outer.key, {})[cls.key] = (
            f"{outer.display_name} at {held.site} -> {cls.display_name} at {site}"
        )


def _path(start: int, goal: int) -> list[int] | None:
    """Class keys from ``start`` to ``goal`` along known dependencies (BFS), or None."""
    parent: dict[int, int] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal:
            path = [node]
            while node != start:
                node = parent[node]
                path.append(node)
            return path[::-1]
        for nxt in _after.get(node, ()):
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None


def _declared_path(start: str, goal: str) -> list[str] | None:
    parent: dict[str, str] = {start: start}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        if node == goal and node != start:
            path = [node]
            while node != start:
                node = parent[node]
                path.append(node)
            return path[::-1]
        for nxt in _declared.get(node, ()):
            if nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    return None


# -- reports (kernel wording) -----------------------------------------------------------

_RULE = "======================================================"


def _thread_name() -> str:
    return threading.current_thread().name


def _add_report(key: tuple[str, int, int], text: str) -> None:
    # caller holds _graph_lock
    if key in _reported:
        return
    _reported.add(key)
    _reports.append(text)


def _report_recursive(held: _Held, cls: LockClass, site: str, *, same_instance: bool) -> None:
    what = "the same lock" if same_instance else "another lock of the same class"
    text = "\n".join(
        [
            _RULE,
            "WARNING: possible recursive locking detected",
            "--------------------------------------------",
            f"thread {_thread_name()} is trying to acquire lock:",
            f"  ({cls.display_name}), at: {site}",
            f"but thread is already holding {what}:",
            f"  ({held.lock_class.display_name}), at: {held.site}",
            "",
            " Possible unsafe locking scenario:",
            "       CPU0",
            "       ----",
            f"  lock({cls.display_name});",
            f"  lock({cls.display_name});",
            "",
            " *** DEADLOCK ***",
            "",
            "May be due to missing lock nesting notation (nests_with_self=True)",
        ]
    )
    with _graph_lock:
        _add_report(("recursive", cls.key, int(same_instance)), text)


def _scenario(outer: str, inner: str) -> list[str]:
    return [
        " Possible unsafe locking scenario:",
        "",
        "       CPU0                    CPU1",
        "       ----                    ----",
        f"  lock({outer});",
        f"                               lock({inner});",
        f"                               lock({outer});",
        f"  lock({inner});",
        "",
        " *** DEADLOCK ***",
    ]


def _report_head(warning: str, held: _Held, cls: LockClass, site: str) -> list[str]:
    """A lock-order report's first lines: the warning, the lock wanted, the lock held."""
    return [
        _RULE,
        f"WARNING: {warning}",
        "------------------------------------------------------",
        f"thread {_thread_name()} is trying to acquire lock:",
        f"  ({cls.display_name}), at: {site}",
        "",
        "but thread is already holding lock:",
        f"  ({held.lock_class.display_name}), at: {held.site}",
        "",
    ]


def _report_circular(held: _Held, cls: LockClass, site: str, chain: list[int]) -> None:
    # caller holds _graph_lock; chain runs cls -> ... -> held class
    outer = held.lock_class
    lines = _report_head("possible circular locking dependency detected", held, cls, site)
    lines += [
        "which lock already depends on the new lock.",
        "",
        "the existing dependency chain (in reverse order) is:",
    ]
    for depth, (a, b) in enumerate(reversed(list(zip(chain, chain[1:], strict=False)))):
        lines.append(f"-> #{depth} ({_names.get(b, b)}): {_after[a][b]}")
    lines.append("")
    lines += _scenario(outer.display_name, cls.display_name)
    _add_report(("circular", outer.key, cls.key), "\n".join(lines))


def _declaring_chain(path: list[str]) -> list[str]:
    """The ``declare_order`` call that orders ``path[0]`` before ``path[-1]``, if one does."""
    for chain in _declared_chains:
        if path[0] in chain and path[-1] in chain:
            return list(chain)
    return path


def _report_declared(held: _Held, cls: LockClass, site: str, declared: list[str]) -> None:
    # caller holds _graph_lock; declared runs cls.name -> ... -> outer.name
    outer = held.lock_class
    lines = _report_head("lock order violation against a declared order", held, cls, site)
    lines += [
        f"declared order: {' -> '.join(_declaring_chain(declared))}",
        "",
    ]
    lines += _scenario(outer.display_name, cls.display_name)
    _add_report(("declared", outer.key, cls.key), "\n".join(lines))
