"""``rcunet lab seed000 --procs``: the server's Host (listener, acceptors, held flows'
server ends, their release, the server's end checks) in a child process, the client's
port search here; the same counts and invariants as in one process (short runs)."""

from __future__ import annotations

import json

from rcunet.cli import main
from rcunet.host.procs import ChildFailed
from rcunet.lab import seed000

# 32 ports, the 16 even ones held: every connect() scans the 16 held ports first.
SMALL = {"ports": 32, "hold": 16, "acceptors": 2, "tw_reuse_delay": 20}


def test_lab_with_the_server_in_a_child_counts_the_same_search():
    result = seed000.run_stack_lab(duration=0.15, rounds=1, clients=2, warmup=0.1,
                                   lockstat_duration=0.1, procs=True, **SMALL)
    assert result["params"]["procs"] is True
    legacy, modern = result["runs"]["legacy"], result["runs"]["modern"]
    for run in (legacy, modern):
        assert run["connections"] > 0 and run["candidates_per_connect"] >= 16
    assert legacy["occupied_candidate_locks_per_connect"] >= 2 * 16
    assert modern["occupied_candidate_locks_per_connect"] == 0
    assert modern["rcu_skips_per_connect"] >= 16
    # the client's lock statistics stay in this process, where the search takes them
    assert result["table_locks"]["legacy"]["per_connect"] > \
        result["table_locks"]["modern"]["per_connect"]
    for mode in ("legacy", "modern"):
        checks = result["checks"][mode]  # passed: finish() raises on any failed check
        n = checks["completed"]
        assert n > 0 and checks["served"] == n  # counted by the child's acceptors
        assert checks["active_opens"] == checks["passive_opens"] == 16 + n
        assert checks["server_ehash"] == checks["server_ehash_after_release"] == 0
        lost = checks["time_wait"] + 16 - checks["time_wait_after_release"]
        assert 0 <= lost <= checks["server_rsts_during_release"]
        assert checks["released"]
        assert checks["leaks"] == {"sockets": 0, "ehash": 0, "ports": 0, "listeners": 0}
    assert "--procs" in seed000.stack_report(result)


def test_a_call_that_raises_in_the_child_reaches_the_parent():
    scenario = seed000.CrrScenario("modern", procs=True, **SMALL)
    try:
        assert scenario.run_slice(0.1, 2)["connections"] > 0
        scenario.server.start_acceptors()  # a thread started twice raises in the child
    except ChildFailed as exc:
        assert "RuntimeError" in str(exc)  # the child's traceback
    else:
        raise AssertionError("the child's error did not reach the parent")
    finally:
        scenario.net.close()
    assert not scenario.net.processes[0].alive


def test_a_failed_run_stops_the_child_without_waiting_for_the_kill():
    scenario = seed000.CrrScenario("modern", procs=True, **SMALL)
    process = scenario.net.processes[0]
    scenario.net.close()  # what run_stack_lab does when a slice fails
    outcome = process.join(0)
    assert outcome.exitcode == 0 and outcome.failure is None  # it saw stop: no SIGKILL


def test_cli_procs(capsys):
    assert main(["lab", "seed000", "--procs", "--ports", "32", "--hold", "16",
                 "--tw-reuse-delay", "20", "-T", "2", "--acceptors", "1", "--duration",
                 "0.05", "--rounds", "1", "--warmup", "0.05", "--lockstat-duration", "0",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["params"]["procs"] is True and result["checks"]["modern"]["completed"] > 0
