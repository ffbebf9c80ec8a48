"""Suite-wide checks: lockdep is on for every test, and a test fails if it produced reports.

Lock-order checking is switched on at import time, before any test module creates a lock,
so every ``rcunet.sync.lock.Lock`` in the suite runs the instrumented path (held stacks,
order graph, ``assert_held``).  ``RCUNET_LOCKDEP=0`` turns it off (e.g. to time something).

After each test:
* lockdep reports (order reversal, declared-order violation, recursive locking) fail it;
  a test that provokes reports on purpose asserts on them and calls ``lockdep.clear()``;
* hooks left installed are removed and fail it (a test must not leak schedules);
* lockdep is switched back on and lock statistics back off if the test changed them.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

from rcunet.sync import hooks, lockdep, lockstat

# Hypothesis's clock checks (an example's deadline, slow input generation) measure the
# machine, not the code: on a loaded CI machine or without the GIL they fail tests whose
# properties hold.  The properties stay; the timing checks go.
settings.register_profile("rcunet", deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("rcunet")

LOCKDEP_ON = os.environ.get("RCUNET_LOCKDEP", "1") != "0"

if LOCKDEP_ON:
    lockdep.enable()


@pytest.fixture(autouse=True)
def _lockdep_guard():
    lockdep.clear()
    stats_were_on = lockstat.enabled()
    yield
    problems = []
    found = lockdep.reports()
    if found:
        problems.append(f"lockdep produced {len(found)} report(s):\n" + "\n\n".join(found))
    lockdep.clear()
    leftover = hooks.active_points()
    if leftover:
        hooks._publish(None)
        problems.append(f"hooks left installed at {sorted(leftover)}")
    if LOCKDEP_ON and not lockdep.enabled():
        lockdep.enable()
    if lockstat.enabled() and not stats_were_on:
        lockstat.disable()
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def unguarded_spin(monkeypatch: pytest.MonkeyPatch) -> None:
    """Spins that never give up for want of CPU (rcunet/sync/spin.py's guard off), here
    and in the child processes a test starts: a test that counts spin hits must not find
    none because a loaded machine made every spin back off."""
    from rcunet.sync import spin

    monkeypatch.setattr(spin, "GUARD", False)
    monkeypatch.setattr(spin, "_calm_until", 0.0)  # a back-off an earlier spin began
    monkeypatch.setenv("RCUNET_SPIN_GUARD", "0")
