"""``rcunet lab seed004 --procs``: the server Host in a child process; every completed
connection served once and counted by both Hosts, nothing left behind on either side."""

from __future__ import annotations

import pytest

from rcunet.lab import seed004


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_crr_churn_with_the_server_in_a_child_process(mode: str) -> None:
    run = seed004._checked(seed004.run_crr(mode, 0.3, acceptors=2, clients=2, procs=True))
    assert run["connections"] > 0
    assert sum(run["served_per_acceptor"]) == run["connections"]
    assert run["nstat"]["TcpPassiveOpens"] == run["connections"]
    assert run["server_cpu_per_connection_us"] > 0


def test_procs_refuses_the_workers_shape() -> None:
    with pytest.raises(ValueError, match="pairs shape"):
        seed004.run_crr("modern", 0.1, shape="workers", procs=True)


def test_the_statistics_run_reports_the_servers_locks() -> None:
    result = seed004.run_lab(0.2, 1, acceptors=2, clients=2, lockstat_duration=0.2,
                             procs=True)
    assert result["params"]["procs"] is True
    legacy = result["lockstat"]["legacy"]
    assert legacy[seed004.TCBINFO_LOCK.name].acquisitions > 0  # taken on accept
    assert result["global_lock"]["modern"]["acquisitions"] == 0
