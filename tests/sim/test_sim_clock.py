"""One virtual clock for everything a simulated program can ask, and the threading
primitives waiting on it."""

from __future__ import annotations

import datetime
import queue
import threading
import time

import pytest
from sim_support import two_hosts

from rcunet.sim.clock import EPOCH_NS


def test_an_hour_of_sleep_is_virtual_and_every_clock_agrees() -> None:
    sim, a, _b = two_hosts()
    seen: dict[str, float] = {}

    def program() -> None:
        m0, p0, t0 = time.monotonic(), time.perf_counter(), time.time()
        time.sleep(3600)
        seen["monotonic"] = time.monotonic() - m0
        seen["perf_counter"] = time.perf_counter() - p0
        seen["time"] = time.time() - t0
        seen["ns"] = time.monotonic_ns()
        seen["now"] = datetime.datetime.now().timestamp()
        seen["wall"] = time.time()

    sim.spawn(a, program)
    assert sim.run()
    sim.close()
    assert seen["monotonic"] == seen["perf_counter"] == seen["time"] == 3600.0
    assert seen["ns"] == 3601 * 10**9  # the clock starts at 1 s
    assert seen["now"] == seen["wall"] == EPOCH_NS / 1e9 + 3600
    assert sim.now == 3600.0
    assert sim.real_seconds < 60  # an hour of sleep never waits for real


def test_timed_waits_of_threading_primitives_end_on_virtual_deadlines() -> None:
    sim, a, _b = two_hosts()
    ends: dict[str, float] = {}

    def program() -> None:
        start = time.monotonic()
        cond = threading.Condition()
        with cond:
            assert not cond.wait(2.5)
        ends["condition"] = time.monotonic() - start
        assert not threading.Event().wait(1.0)
        ends["event"] = time.monotonic() - start
        sem = threading.Semaphore(0)
        assert not sem.acquire(timeout=0.5)
        ends["semaphore"] = time.monotonic() - start
        with pytest.raises(queue.Empty):
            queue.Queue().get(timeout=1)
        ends["queue"] = time.monotonic() - start
        lock = threading.Lock()
        lock.acquire()
        assert not lock.acquire(timeout=2)
        ends["lock"] = time.monotonic() - start
        sleeper = threading.Thread(target=time.sleep, args=(100,))
        sleeper.start()
        sleeper.join(timeout=3)
        assert sleeper.is_alive()
        ends["join"] = time.monotonic() - start
        sleeper.join()
        ends["joined"] = time.monotonic() - start

    sim.spawn(a, program)
    assert sim.run()
    sim.close()
    assert ends == {"condition": 2.5, "event": 3.5, "semaphore": 4.0, "queue": 5.0,
                    "lock": 7.0, "join": 10.0, "joined": 107.0}


def test_threads_hand_work_over_queues_barriers_and_conditions() -> None:
    sim, a, _b = two_hosts(seed=4)
    results: list[int] = []

    def program() -> None:
        work: queue.Queue[int | None] = queue.Queue(maxsize=2)
        barrier = threading.Barrier(3)
        done = threading.Event()

        def worker() -> None:
            barrier.wait()
            while (item := work.get()) is not None:
                time.sleep(0.01)
                results.append(item * item)

        workers = [threading.Thread(target=worker) for _ in range(2)]
        for thread in workers:
            thread.start()
        barrier.wait()
        for item in range(20):
            work.put(item)
        for _ in workers:
            work.put(None)
        for thread in workers:
            thread.join()
        done.set()

    sim.spawn(a, program)
    assert sim.run()
    sim.close()
    assert sorted(results) == [i * i for i in range(20)]


def _order(seed: int) -> list[str]:
    sim, a, _b = two_hosts(seed=seed)
    order: list[str] = []

    def program() -> None:
        def one(name: str) -> None:
            time.sleep(1)  # all wake at the same instant: the seed picks the order
            order.append(name)

        threads = [threading.Thread(target=one, args=(f"t{i}",)) for i in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    sim.spawn(a, program)
    assert sim.run()
    sim.close()
    return order


def test_the_seed_picks_the_schedule() -> None:
    assert _order(11) == _order(11)
    orders = {tuple(_order(seed)) for seed in range(1, 6)}
    assert len(orders) > 1


def test_run_until_pauses_and_resumes_the_programs() -> None:
    sim, a, _b = two_hosts()
    ticks: list[float] = []

    def program() -> None:
        for _ in range(10):
            time.sleep(1)
            ticks.append(time.monotonic())

    sim.spawn(a, program)
    assert not sim.run(until=4.5)
    assert len(ticks) == 4 and sim.now == 4.5
    assert sim.run()
    sim.close()
    assert len(ticks) == 10 and sim.now == 10.0


def _draws(seed: int, seed_random: bool) -> tuple[object, ...]:
    import os
    import random
    import secrets
    import uuid

    sim, a, _b = two_hosts(seed=seed, seed_random=seed_random)

    def program() -> tuple[object, ...]:
        return (random.random(), os.urandom(8), uuid.uuid4(), secrets.token_hex(8),
                random.SystemRandom().random())

    drawn = sim.spawn(a, program)
    assert sim.run()
    sim.close()
    return drawn.result  # type: ignore[no-any-return]


def test_seed_random_gives_the_program_seeded_randomness() -> None:
    import random

    state = random.getstate()
    assert _draws(3, True) == _draws(3, True)
    assert _draws(3, True) != _draws(4, True)
    assert random.getstate() == state  # the process's own generator is left as it was
    assert _draws(3, False) != _draws(3, False)
