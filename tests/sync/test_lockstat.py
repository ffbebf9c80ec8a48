"""Lock classes and lock statistics.

Covered: contention is counted exactly when an acquisition had to wait (forced with a
schedule, no sleeps), acquisitions/hold/wait bookkeeping, contention and contending call
sites, reset; the /proc/lock_stat and perf lock contention layouts byte for byte against
the examples of bench-conventions §7 and parsed the way the kernel's users parse them;
the fast mode really is the bare lock; Condition compatibility; assert_held.
"""

from __future__ import annotations

import gc
import sys
import threading

import pytest

from rcunet.sync import lock as lock_mod
from rcunet.sync import lockdep, lockstat
from rcunet.sync.hooks import Schedule
from rcunet.sync.lock import CONTENDED, LockClass
from rcunet.sync.lockstat import CallSite, ClassStats

JOIN_S = 5.0


@pytest.fixture
def stats():
    lockstat.enable()
    yield
    lockstat.disable()


def _contend_once(lk, waiter_fn) -> None:
    """Hold ``lk`` in a thread while ``waiter_fn`` (run in thread "W") fails its trylock."""
    held = threading.Event()
    go = threading.Event()

    def holder():
        with lk:
            held.set()
            go.wait(JOIN_S)

    with Schedule() as sched:
        sched.pause_at(CONTENDED, thread="W")
        h = threading.Thread(target=holder, name="H")
        h.start()
        assert held.wait(JOIN_S)
        w = threading.Thread(target=waiter_fn, name="W")
        w.start()
        sched.wait_paused()  # W's trylock failed: one contention, decided
        sched.release()
        go.set()
        h.join(JOIN_S)
        w.join(JOIN_S)
    assert not h.is_alive() and not w.is_alive()


def test_uncontended_acquisitions_are_counted_without_contention(stats):
    cls = LockClass("t_uncontended")
    lk = cls.new()
    for _ in range(5):
        with lk:
            pass
    lk.acquire()
    lk.release()
    s = lockstat.class_stats(cls)
    assert s.acquisitions == 6
    assert s.contentions == 0 and s.wait_total == 0
    assert s.hold_total >= s.hold_max >= s.hold_min >= 0
    assert s.contention_points == () and s.contending_points == ()


def waiter_site(lk):
    with lk:
        pass


def test_forced_contention_counts_one_and_records_both_sites(stats):
    cls = LockClass("t_contended")
    lk = cls.new()
    _contend_once(lk, lambda: waiter_site(lk))
    s = lockstat.class_stats(cls)
    assert s.acquisitions == 2
    assert s.contentions == 1
    assert s.con_bounces == 1
    assert s.wait_total == s.wait_max == s.wait_min > 0
    (point,) = s.contention_points
    assert point.site.startswith("waiter_site:") and point.count == 1
    (holder,) = s.contending_points
    assert holder.site.startswith("_contend_once.<locals>.holder:")


def test_failed_trylock_is_not_a_contention(stats):
    cls = LockClass("t_trylock")
    lk = cls.new()
    with lk:
        t = threading.Thread(target=lambda: lk.acquire(blocking=False))
        t.start()
        t.join(JOIN_S)
    s = lockstat.class_stats(cls)
    assert s.contentions == 0 and s.acquisitions == 1


def test_instances_of_a_class_share_statistics(stats):
    cls = LockClass("t_shared")
    a, b = cls.new(), cls.new()
    with a:
        pass
    with b:
        pass
    assert lockstat.class_stats(cls).acquisitions == 2


def test_reset_zeroes_and_snapshot_skips_unused_classes(stats):
    cls = LockClass("t_reset")
    lk = cls.new()
    with lk:
        pass
    assert "t_reset" in lockstat.snapshot()
    lockstat.reset([cls])
    assert lockstat.class_stats(cls).acquisitions == 0
    assert "t_reset" not in lockstat.snapshot()


def test_timed_out_acquire_counts_contention_and_returns_false(stats):
    cls = LockClass("t_timeout")
    lk = cls.new()
    result = []
    with lk:
        t = threading.Thread(target=lambda: result.append(lk.acquire(timeout=0.01)))
        t.start()
        t.join(JOIN_S)
    assert result == [False]
    s = lockstat.class_stats(cls)
    assert s.contentions == 1 and s.acquisitions == 1


def test_nonblocking_with_timeout_is_rejected_like_threading():
    lk = LockClass("t_args").new()
    with pytest.raises(ValueError):
        lk.acquire(False, 1.0)


def test_release_of_unlocked_lock_raises_and_keeps_stats_sane(stats):
    cls = LockClass("t_unlocked")
    lk = cls.new()
    with pytest.raises(RuntimeError):
        lk.release()
    with lk:
        pass
    assert lockstat.class_stats(cls).acquisitions == 1


def test_repeated_class_name_gets_lockdep_version_suffix():
    first = LockClass("t_dup")
    second = LockClass("t_dup")
    assert first.display_name == "t_dup"
    assert second.display_name == "t_dup#2"


def test_class_name_must_be_one_token():
    with pytest.raises(ValueError):
        LockClass("two words")
    with pytest.raises(ValueError):
        LockClass("")


def test_fast_mode_is_the_bare_lock():
    lockdep.disable()
    try:
        assert not lock_mod.stats_enabled() and not lock_mod.checks_enabled()
        cls = LockClass("t_fast")
        lk = cls.new()
        raw = lk._lock
        with lk:
            assert raw.locked()
            assert lk._site is None and lk._owner is None  # no bookkeeping at all
        assert not raw.locked()
        assert lk.acquire(False) and raw.locked()
        lk.release()
        lockstat.enable()  # an existing lock is instrumented from its next acquisition
        with lk:
            assert lk._site is not None
        assert lockstat.class_stats(cls).acquisitions == 1
        lockstat.disable()
        with lk:
            assert lk._acquired_at is None
    finally:
        lockdep.enable()


def test_mode_switch_while_held_is_tolerated():
    lockdep.disable()
    lk = LockClass("t_switch").new()
    lk.acquire()  # fast mode
    lockstat.enable()
    lockdep.enable()
    lk.release()  # instrumented release of a fast acquisition
    assert not lk.locked()
    with lk:
        lk.assert_held()
    lockstat.disable()


def test_condition_works_with_instrumented_lock(stats):
    cls = LockClass("t_cond")
    lk = cls.new()
    cond = threading.Condition(lk)
    ready = []

    def consumer():
        with cond:
            cond.wait_for(lambda: ready, timeout=JOIN_S)

    t = threading.Thread(target=consumer)
    t.start()
    with cond:
        ready.append(1)
        cond.notify_all()
    t.join(JOIN_S)
    assert not t.is_alive()
    assert lockstat.class_stats(cls).acquisitions >= 2


def test_assert_held_checks_the_owner_thread():
    lk = LockClass("t_held").new()
    with pytest.raises(AssertionError):
        lk.assert_held()
    with lk:
        lk.assert_held()
        errors = []

        def other():
            try:
                lk.assert_held()
            except AssertionError as exc:
                errors.append(exc)

        t = threading.Thread(target=other)
        t.start()
        t.join(JOIN_S)
        assert errors, "another thread must not pass assert_held"


# -- report layouts (bench-conventions §7, examples reproduced exactly) -------------------

LOCK_STAT_EXAMPLE = """\
lock_stat version 0.4
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------
                              class name    con-bounces    contentions   waittime-min   waittime-max waittime-total   waittime-avg    acq-bounces   acquisitions   holdtime-min   holdtime-max holdtime-total   holdtime-avg
-----------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------------

                         conn_table_lock:           812           1203           0.21          48.90        2310.40           1.92           9870         455120           0.10          61.20       44913.00           0.10
                         ---------------
                         conn_table_lock            731          [<00000000a3f1c2e0>] ConnTable.lookup:118
                         conn_table_lock            472          [<00000000a3f1c7b4>] ConnTable.insert:141
                         ---------------
                         conn_table_lock            990          [<00000000a3f1c7b4>] ConnTable.insert:141
                         conn_table_lock            213          [<00000000a3f1c2e0>] ConnTable.lookup:118

.............................................................................................................................................................................................................................

"""  # noqa: E501

LOOKUP = 0xA3F1C2E0
INSERT = 0xA3F1C7B4


def _stats(name, kind="mutex", *, contentions=0, wait=(0, 0, 0), acquisitions=1, hold=(0, 0, 0),
           points=(), holders=(), con_bounces=0, acq_bounces=0):
    return ClassStats(
        name=name, display_name=name, kind=kind, con_bounces=con_bounces,
        contentions=contentions, wait_min=wait[0], wait_max=wait[1], wait_total=wait[2],
        acq_bounces=acq_bounces, acquisitions=acquisitions, hold_min=hold[0],
        hold_max=hold[1], hold_total=hold[2], contention_points=tuple(points),
        contending_points=tuple(holders),
    )


def conn_table_stats():
    return _stats(
        "conn_table_lock", con_bounces=812, contentions=1203, wait=(210, 48900, 2310400),
        acq_bounces=9870, acquisitions=455120, hold=(100, 61200, 44913000),
        points=[CallSite("ConnTable.lookup:118", LOOKUP, 731),
                CallSite("ConnTable.insert:141", INSERT, 472)],
        holders=[CallSite("ConnTable.insert:141", INSERT, 990),
                 CallSite("ConnTable.lookup:118", LOOKUP, 213)],
    )


def test_lock_stat_layout_matches_the_kernel_example_exactly():
    text = lockstat.format_lock_stat({"conn_table_lock": conn_table_stats()})
    assert text == LOCK_STAT_EXAMPLE


def test_lock_stat_time_rounding_is_lockdep_procs():
    assert lockstat.lock_stat_time(0) == "0.00"
    assert lockstat.lock_stat_time(4) == "0.00"
    assert lockstat.lock_stat_time(5) == "0.01"
    assert lockstat.lock_stat_time(1920) == "1.92"
    assert lockstat.lock_stat_time(48900) == "48.90"
    assert lockstat.lock_stat_time(1_999_995) == "2000.00"


def test_lock_stat_rows_parse_like_grep_colon(stats):
    quiet = LockClass("t_parse_quiet")
    busy = LockClass("t_parse_busy")
    q = quiet.new()
    b = busy.new()
    for _ in range(3):
        with q:
            pass
    _contend_once(b, lambda: waiter_site(b))
    text = lockstat.format_lock_stat(lockstat.snapshot([quiet, busy]))
    lines = text.splitlines()
    assert lines[0] == "lock_stat version 0.4"
    assert lines[1] == "-" * 221 and lines[3] == "-" * 221
    header = lines[2].split()
    assert header[:2] == ["class", "name"] and len(header) == 14
    rows = [ln for ln in lines if ":" in ln and "[<" not in ln and ln.index(":") == 40]
    names = [r[:40].strip() for r in rows]
    assert names == ["t_parse_busy", "t_parse_quiet"]  # sorted by contentions
    for row in rows:
        fields = row[41:].split()
        assert len(fields) == 12
        assert all(f.isdigit() for f in (fields[0], fields[1], fields[6], fields[7]))
        assert all(f.count(".") == 1 and len(f.split(".")[1]) == 2 for f in fields[2:6])
    busy_fields = rows[0][41:].split()
    assert busy_fields[1] == "1" and busy_fields[7] == "2"
    quiet_fields = rows[1][41:].split()
    assert quiet_fields[1] == "0" and quiet_fields[7] == "3"
    # the contention/contending points block follows the contended class only
    point_lines = [ln for ln in lines if "[<" in ln]
    assert len(point_lines) == 2
    assert point_lines[0].split()[-1].startswith("waiter_site:")
    assert "." * 221 in lines


def test_lock_stat_truncates_long_names_like_the_kernel():
    long = "x" * 50
    s = _stats(long)
    row = lockstat.format_lock_stat({long: s}).splitlines()[5]
    assert row.startswith(" " * 3 + "x" * 37 + ":")


PERF_EXAMPLE = """\
 contended   total wait     max wait     avg wait         type   caller

      1203      2.31 ms     48.90 us      1.92 us        mutex   ConnTable.lookup:118
       159    324.02 us     12.70 us      2.04 us     rwlock:W   Tcb.on_segment:412
        37      8.11 us       640 ns       219 ns     spinlock   TimerWheel.add:88
"""

PERF_CSV_EXAMPLE = """\
# output: contended, total wait, max wait, avg wait, type, caller
1203, 2310400, 48900, 1920, mutex, ConnTable.lookup:118
159, 324020, 12700, 2037, rwlock:W, Tcb.on_segment:412
37, 8112, 640, 219, spinlock, TimerWheel.add:88
"""


def perf_snapshot():
    return {
        "conn_table_lock": _stats("conn_table_lock", contentions=1203,
                                  wait=(210, 48900, 2310400),
                                  points=[CallSite("ConnTable.lookup:118", LOOKUP, 1203,
                                                   2310400, 48900, 210)]),
        "&tcb->lock": _stats("&tcb->lock", "rwlock:W", contentions=159, wait=(280, 12700, 324020),
                             points=[CallSite("Tcb.on_segment:412", 1, 159, 324020, 12700, 280)]),
        "timer_wheel_lock": _stats("timer_wheel_lock", "spinlock", contentions=37,
                                   wait=(95, 640, 8112),
                                   points=[CallSite("TimerWheel.add:88", 2, 37, 8112, 640, 95)]),
    }


def test_perf_lock_contention_matches_the_example_exactly():
    assert lockstat.format_perf_lock_contention(perf_snapshot()) == PERF_EXAMPLE


def test_perf_lock_contention_csv_matches_the_example_exactly():
    assert lockstat.format_perf_lock_contention(perf_snapshot(), sep=",") == PERF_CSV_EXAMPLE


def test_perf_units_scale_like_builtin_lock():
    assert lockstat.perf_time(999) == "      999 ns"
    assert lockstat.perf_time(1000) == "     1.00 us"
    assert lockstat.perf_time(2_310_400) == "     2.31 ms"
    assert lockstat.perf_time(3 * 10**9) == "     3.00 s "
    assert lockstat.perf_time(120 * 10**9) == "     2.00 m "
    assert lockstat.perf_time(7200 * 10**9) == "     2.00 h "


def test_perf_rejects_separators_perf_refuses():
    for sep in (":", "+", ".", ""):
        with pytest.raises(ValueError):
            lockstat.format_perf_lock_contention(perf_snapshot(), sep=sep)


def test_perf_sort_keys_and_class_view():
    snap = perf_snapshot()
    by_count = lockstat.format_perf_lock_contention(snap, sort="contended").splitlines()
    assert by_count[2].split()[0] == "1203"
    by_class = lockstat.format_perf_lock_contention(snap, by="class").splitlines()
    assert by_class[0].endswith("address   symbol")
    assert by_class[2].endswith("conn_table_lock (mutex)")
    assert len(by_class[2].split()[-3]) == 16  # the address column
    with pytest.raises(ValueError):
        lockstat.format_perf_lock_contention(snap, sort="bogus")


def test_perf_rows_come_from_real_contention(stats):
    cls = LockClass("t_perf_real")
    lk = cls.new()
    _contend_once(lk, lambda: waiter_site(lk))
    text = lockstat.format_perf_lock_contention(lockstat.snapshot([cls]))
    row = text.splitlines()[2]
    assert row.split()[0] == "1"
    assert row.split()[-2] == "mutex"
    assert row.split()[-1].startswith("waiter_site:")


PERF_REPORT_EXAMPLE = (  # noqa: E501 (the report's own line width)
    "                Name   acquired  contended     avg wait   total wait     max wait     min wait \n"  # noqa: E501
    "\n"
    "     conn_table_lock     455120       1203      1.92 us      2.31 ms     48.90 us       210 ns \n"  # noqa: E501
    "          &tcb->lock     201892        159      2.04 us    324.02 us     12.70 us       280 ns \n"  # noqa: E501
    " timer_wheel_lock...      90010         37       219 ns      8.11 us       640 ns        95 ns \n"  # noqa: E501
)


def test_perf_lock_report_matches_the_example_exactly():
    snap = {
        "conn_table_lock": _stats("conn_table_lock", contentions=1203, acquisitions=455120,
                                  wait=(210, 48900, 2310400)),
        "&tcb->lock": _stats("&tcb->lock", contentions=159, acquisitions=201892,
                             wait=(280, 12700, 324020)),
        "timer_wheel_lock_long": _stats("timer_wheel_lock_long", contentions=37,
                                        acquisitions=90010, wait=(95, 640, 8112)),
    }
    assert lockstat.format_perf_lock_report(snap) == PERF_REPORT_EXAMPLE
    by_contended = lockstat.format_perf_lock_report(snap, sort="contended", limit=1)
    assert by_contended.splitlines()[2].split()[0] == "conn_table_lock"
    with pytest.raises(ValueError):
        lockstat.format_perf_lock_report(snap, sort="bogus")


def test_an_instrumented_lock_is_no_cycle_with_itself():
    # lockdep or lockstat on: each lock's acquire/release used to be its own bound
    # methods, a cycle per lock (several per socket) that only the cyclic collector freed
    lockstat.enable()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        lk = LockClass("t_nocycle").new()
        with lk:
            assert lk.locked()
        # nothing but this frame's variable (and getrefcount's argument) refers to it, so
        # reference counting alone frees it (a Lock is not weakly referenceable: compiled,
        # it is a native class without __weakref__)
        assert sys.getrefcount(lk) == 2
    finally:
        if was_enabled:
            gc.enable()
        lockstat.disable()


def test_a_temporary_lock_in_a_with_statement_still_works_when_instrumented():
    # `with CLASS.new():` keeps the handles, not the lock: nothing else can reach it
    with LockClass("t_temp").new():
        pass
