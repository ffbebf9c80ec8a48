"""Seed 002: one shared route-cache entry pinned and released by N threads.

Each worker loops ``if ref.get(): ref.put()`` on the same refcount — dst_hold/dst_release on
one hot ``dst_entry``, the pattern that collapsed under ``atomic_inc_not_zero`` (reference
§4.1: "an average of 8!! retry loops per atomic_inc_not_zero() invocation" on 112 CPUs).

* legacy: ``IncNotZeroRef`` (compare-and-swap retry loop on get, atomic_dec_return on put)
* modern: ``RcuRef`` (one unconditional add on get; put in an RCU guard, one unconditional
  subtract, CAS only on the final put)

The rate is get+put pairs per second over all threads.  The counts say what the algorithms
did: CAS retries (legacy), slow paths, and the final count, which must be back at its base.
What Python can and cannot show here: both words are emulated with a tiny per-object lock
(see rcunet.sync.refcount), so the rate difference is interpreter cost, not ``lock add`` vs
``lock cmpxchg``.  The structural difference is the retry count.  Under the GIL threads
interleave only at the interpreter's switch points, so natural retries are rare; the
``forced_window`` run releases the GIL inside every read->CAS window (a hook at the yield
point), and while each reference is held (as a real dst user holds it across a send), modelling
other CPUs writing the word there — legacy then retries, rcuref has no such window and
cannot.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from rcunet.sync import hooks
from rcunet.sync.rcu import rcu as default_rcu
from rcunet.sync.refcount import INC_NOT_ZERO_BEFORE_CAS, IncNotZeroRef, RcuRef

Ref = RcuRef | IncNotZeroRef


def _pairs(
    ref: Ref, hold: Callable[[], None] | None = None
) -> Callable[[Callable[[], bool]], int]:
    """get+put pairs; ``hold`` (if given) runs while the reference is held."""
    get, put = ref.get, ref.put

    def loop(stopped: Callable[[], bool]) -> int:
        n = 0
        while not stopped():
            for _ in range(64):  # check the stop flag every 64 pairs
                if get():
                    put()
            n += 64
        return n

    def holding_loop(stopped: Callable[[], bool]) -> int:
        assert hold is not None
        n = 0
        while not stopped():
            if get():
                hold()
                put()
            n += 1
        return n

    return loop if hold is None else holding_loop


def _rcusafe_pairs(ref: RcuRef) -> Callable[[Callable[[], bool]], int]:
    """The whole pair inside the caller's read section (rcuref_put_rcusafe)."""
    get, put = ref.get, ref.put_rcusafe
    read_lock, read_unlock = default_rcu.read_lock, default_rcu.read_unlock

    def loop(stopped: Callable[[], bool]) -> int:
        n = 0
        while not stopped():
            for _ in range(64):
                read_lock()
                if get():
                    put()
                read_unlock()
            n += 64
        return n

    return loop


def _gets(ref: Ref) -> Callable[[Callable[[], bool]], int]:
    """Gets alone, never a put: the rate of the operation the two algorithms differ in
    (one fetch-and-add against a load and a CAS that may retry).  The references taken
    are given back by ``_give_back`` after the timed run."""
    get = ref.get

    def loop(stopped: Callable[[], bool]) -> int:
        n = 0
        while not stopped():
            for _ in range(64):
                get()
            n += 64
        return n

    return loop


def _give_back(ref: Ref, count: int) -> None:
    """``count`` puts, untimed, inside one read section (rcuref_put_rcusafe's contract)."""
    with default_rcu.read():
        for _ in range(count):
            ref.put_rcusafe()


def get_rates(duration: float, threads: int) -> dict[str, Any]:
    """Gets per second over all threads, legacy and modern, and the counts back at 1."""
    out: dict[str, Any] = {}
    for name, ref in (("legacy", IncNotZeroRef()), ("modern", RcuRef())):
        rate, gets = _run(_gets(ref), duration, threads)
        _give_back(ref, gets)
        out[name] = {"rate": rate, "cas_retries": ref.cas_retries, "final_refs": ref.read()}
    out["ratio"] = out["modern"]["rate"] / out["legacy"]["rate"]
    return out


def _run(
    loop: Callable[[Callable[[], bool]], int], duration: float, threads: int
) -> tuple[float, int]:
    """(pairs per second, pairs) with ``threads`` workers running ``loop`` for ``duration``."""
    stop = threading.Event()
    start = threading.Barrier(threads + 1)
    counts = [0] * threads
    errors: list[BaseException] = []

    def worker(i: int) -> None:
        try:
            start.wait()
            counts[i] = loop(stop.is_set)
        except BaseException as exc:  # surfaced below, not lost in the thread
            errors.append(exc)

    workers = [
        threading.Thread(target=worker, args=(i,), name=f"s002-{i}") for i in range(threads)
    ]
    for t in workers:
        t.start()
    start.wait()
    t0 = time.perf_counter()
    time.sleep(duration)
    stop.set()
    for t in workers:
        t.join()
    elapsed = time.perf_counter() - t0
    if errors:
        raise errors[0]
    return sum(counts) / elapsed, sum(counts)


def _one(ref: Ref, loop: Callable[[Callable[[], bool]], int], duration: float,
         threads: int) -> dict[str, Any]:
    rate, pairs = _run(loop, duration, threads)
    return {
        "rate": rate,
        "cas_retries": ref.cas_retries,
        "retries_per_million_gets": ref.cas_retries / pairs * 1e6 if pairs else 0.0,
        "slow_paths": ref.slow_paths,
        "final_refs": ref.read(),  # back at base (1) if every get was paired with a put
    }


def measure(duration: float, threads: int = 4) -> dict[str, Any]:
    """Legacy vs modern rates and counts; ``duration`` seconds per timed run (6 runs)."""
    if duration <= 0 or threads < 1:
        raise ValueError("duration must be > 0 and threads >= 1")
    legacy_ref = IncNotZeroRef()
    legacy = _one(legacy_ref, _pairs(legacy_ref), duration, threads)
    modern_ref = RcuRef()
    modern = _one(modern_ref, _pairs(modern_ref), duration, threads)
    rcusafe_ref = RcuRef()
    rcusafe = _one(rcusafe_ref, _rcusafe_pairs(rcusafe_ref), duration, threads)
    forced = _forced_window(duration / 2, threads)
    gets = get_rates(duration, threads)
    return {
        "legacy": legacy["rate"],
        "modern": modern["rate"],
        "ratio": modern["rate"] / legacy["rate"],
        "threads": threads,
        "duration": duration,
        "legacy_cas_retries": legacy["cas_retries"],
        "legacy_retries_per_million_gets": legacy["retries_per_million_gets"],
        "legacy_slow_paths": legacy["slow_paths"],
        "modern_cas_retries": modern["cas_retries"],
        "modern_slow_paths": modern["slow_paths"],
        "modern_rcusafe": rcusafe["rate"],
        "final_refs": {"legacy": legacy["final_refs"], "modern": modern["final_refs"],
                       "modern_rcusafe": rcusafe["final_refs"]},
        "forced_window": forced,
        "gets": gets,
        "gil": _gil_enabled(),
    }


def _forced_window(duration: float, threads: int) -> dict[str, Any]:
    """Both algorithms with the GIL handed over while a reference is held and inside
    inc_not_zero's read->CAS window, so other threads really change the word there."""
    out: dict[str, Any] = {}
    with hooks.installed({INC_NOT_ZERO_BEFORE_CAS: _yield_cpu}):
        for name, ref in (("legacy", IncNotZeroRef()), ("modern", RcuRef())):
            r = _one(ref, _pairs(ref, hold=_yield_cpu), duration, threads)
            out[name] = {"rate": r["rate"], "cas_retries": r["cas_retries"],
                         "retries_per_get": r["retries_per_million_gets"] / 1e6,
                         "final_refs": r["final_refs"]}
    return out


def _yield_cpu() -> None:
    time.sleep(1e-6)  # a real (tiny) sleep: the GIL goes to a thread that writes the word


def _gil_enabled() -> bool:
    check = getattr(sys, "_is_gil_enabled", None)
    return True if check is None else bool(check())


def counts_text(result: dict[str, Any]) -> str:
    """The seed's counters as key=value lines (its ``--lockstat`` view: no lock classes)."""
    forced = result["forced_window"]
    lines = [
        f"legacy_cas_retries={result['legacy_cas_retries']}",
        f"legacy_retries_per_million_gets={result['legacy_retries_per_million_gets']:.1f}",
        f"modern_cas_retries={result['modern_cas_retries']}",
        f"modern_slow_paths={result['modern_slow_paths']}",
        f"gets.legacy.cas_retries={result['gets']['legacy']['cas_retries']}",
        f"gets.modern.cas_retries={result['gets']['modern']['cas_retries']}",
        f"forced_window.legacy.retries_per_get={forced['legacy']['retries_per_get']:.3f}",
        f"forced_window.modern.retries_per_get={forced['modern']['retries_per_get']:.3f}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--duration", type=float, default=1.0, help="seconds per timed run")
    parser.add_argument("--threads", type=int, default=4)
    args = parser.parse_args(argv)
    print(json.dumps(measure(args.duration, args.threads), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
