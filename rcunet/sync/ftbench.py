"""The free-threaded read pitfalls, measured: ``python -m rcunet.sync.ftbench``.

Each case reads something that another (still running) thread created, the way a table
lookup reads what a writer published, and prints nanoseconds per read:

* ``dict.get`` vs ``d[k]`` vs ``k in d`` with a key equal to, but not the object stored by,
  the other thread (a fresh ``bytes`` address, as a packet or a parsed sockaddr gives);
* an attribute read of an object with ``__slots__`` vs one with ordinary attributes
  (``rcunet.core.freethreaded`` explains the difference), the value made by the other thread.

On free-threaded CPython 3.13 the ``dict.get`` and ``__slots__`` cases take a lock on
every read (``dict.get`` even spins on the lock it already holds); with the GIL every case
costs about the same.  Numbers only: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import platform
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rcunet.core.freethreaded import FREE_THREADED

_KEY = bytes([10, 0, 0, 2])


class _Slotted:
    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value


class _Plain:
    def __init__(self, value: object) -> None:
        self.value = value


def _made_by_another_thread() -> tuple[dict[bytes, object], _Slotted, _Plain, threading.Event]:
    """A dict keyed by addresses, and one object of each layout, all made by a thread that
    stays alive (parked on the returned event) while the caller reads them."""
    made: dict[str, Any] = {}
    ready, done = threading.Event(), threading.Event()

    def owner() -> None:
        made["d"] = {bytes(bytearray(_KEY[:3] + bytes([i]))): object() for i in range(8)}
        made["s"] = _Slotted(bytes(bytearray(_KEY)))
        made["p"] = _Plain(bytes(bytearray(_KEY)))
        ready.set()
        done.wait()

    threading.Thread(target=owner, name="ftbench-owner", daemon=True).start()
    ready.wait()
    return made["d"], made["s"], made["p"], done


def _ns_per_call(fn: Callable[[int], None], n: int) -> float:
    start = time.perf_counter_ns()
    fn(n)
    return (time.perf_counter_ns() - start) / n


def measure(n: int = 2000) -> dict[str, float]:
    """Nanoseconds per read for each case (``n`` reads each)."""
    d, slotted, plain, done = _made_by_another_thread()
    keys = [bytes(bytearray(_KEY)) for _ in range(16)]  # equal to a stored key, not it
    get = d.get

    def dict_get(n: int) -> None:
        for i in range(n):
            get(keys[i & 15])

    def dict_subscript(n: int) -> None:
        for i in range(n):
            d[keys[i & 15]]

    def dict_contains(n: int) -> None:
        for i in range(n):
            keys[i & 15] in d  # noqa: B015 - the lookup is the point

    def slots_attr(n: int) -> None:
        for _ in range(n):
            slotted.value  # noqa: B018 - the read is the point

    def plain_attr(n: int) -> None:
        for _ in range(n):
            plain.value  # noqa: B018 - the read is the point

    try:
        return {name: _ns_per_call(fn, n) for name, fn in (
            ("dict.get(k)", dict_get), ("d[k]", dict_subscript), ("k in d", dict_contains),
            ("slots attribute", slots_attr), ("ordinary attribute", plain_attr))}
    finally:
        done.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=2000, help="reads per case (default 2000)")
    args = parser.parse_args(argv)
    if args.n <= 0:
        raise SystemExit("-n must be positive")
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    build = "free-threaded build, GIL " + ("on" if gil else "off") if FREE_THREADED else "GIL"
    print(f"reads of objects another thread made ({platform.python_implementation()} "
          f"{platform.python_version()}, {build})")
    for name, ns in measure(args.n).items():
        print(f"{name:20} {ns:>10,.0f} ns/read")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
