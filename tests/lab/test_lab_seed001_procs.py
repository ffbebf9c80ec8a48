"""``rcunet lab seed001 --procs``: the slow reader's Host in a child process, the sender's
here; every byte arrives in order (hashed) and the reader's figures come back."""

from __future__ import annotations

import pytest

from rcunet.host.socklock import SLOCK
from rcunet.lab import seed001


@pytest.mark.parametrize("mode", ["legacy", "modern"])
def test_stream_to_a_reader_in_a_child_process(mode: str) -> None:
    run = seed001._checked(seed001.run_stream(mode, duration=0.3, chunk=8192, work_us=10,
                                              procs=True))
    assert run["bytes_sent"] > 0 and run["hash_ok"]
    assert run["recv_calls"] > 0 and run["holds"] >= run["recv_calls"]
    assert 0 < run["hold_ns_per_recv_p50"] <= run["hold_ns_per_recv_p99"]
    assert run["nstat"]["TcpPassiveOpens"] == 1  # the reader's Host's counters
    buffers = run["buffers"]  # measured in the child, where the reader frees them
    if mode == "legacy":
        assert buffers["deferred"] == 0 and buffers["freed_local"] > 0
    else:
        assert buffers["deferred"] > 0


def test_the_statistics_run_reports_the_readers_locks() -> None:
    result = seed001.run_lab(0.2, 1, chunk=8192, work_us=5, lockstat_duration=0.2,
                             procs=True)
    assert result["params"]["procs"] is True
    assert "--procs" in seed001.command_line(result["params"])
    for mode in ("legacy", "modern"):
        locks = result["lockstat"][mode]  # the reader's process's: its socket's lock
        assert locks[SLOCK.name].acquisitions > 0
