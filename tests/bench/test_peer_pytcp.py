"""``--target pmd-pytcp`` and ``--target pmd-pytcp-blocking``: the peer stack pmd-pytcp as
the neper server on a TAP device, Linux sockets as the client (rcunet/bench/peer_pytcp.py).

Each run is a separate ``rcunet bench`` process (pmd-pytcp's stack is process-wide state)
bounded by a timeout; RR runs count transactions exactly, stream runs last a second.
What is checked: the run completes with neper's keys, the exact transaction count, bytes
actually measured by the pmd-pytcp side, the device and its addresses gone afterwards
(also after a refused run), and the clear errors (no package, no CAP_NET_ADMIN,
-c/--server).  Nothing here asserts a rate.

Needs root (a TAP device); without it the tests are skipped, under ``CI`` they fail.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from rcunet.bench import peer_pytcp
from rcunet.bench.neper import NeperError

pytestmark = pytest.mark.interop

KEY_VALUE = re.compile(r"^(?P<key>.*)=(?P<value>.*)$", re.M)
RUN_TIMEOUT = 120  # seconds: start-up (~4 s of address probing) plus the run, loaded


@pytest.fixture(autouse=True)
def _require_root() -> None:
    if os.geteuid() == 0:
        return
    message = "--target pmd-pytcp needs root (a TAP device)"
    if os.environ.get("CI"):
        pytest.fail(message + "; CI must run it as root", pytrace=False)
    pytest.skip(message)


def bench(*argv: str) -> tuple[int, dict[str, str], str, int]:
    """Run ``rcunet bench ARGV`` in its own process; (status, keys, stderr, pid)."""
    process = subprocess.Popen([sys.executable, "-m", "rcunet", "bench", *argv, "--nolog"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = process.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        process.kill()  # its TAP device goes with its file descriptor
        out, err = process.communicate()
        pytest.fail(f"rcunet bench {' '.join(argv)} did not end in {RUN_TIMEOUT} s:\n{err}")
    values = {m.group("key"): m.group("value") for m in KEY_VALUE.finditer(out)}
    return process.returncode, values, err, process.pid


def assert_cleaned_up(pid: int) -> None:
    """The run's device (named after its pid) and its 10.88.N addresses are gone."""
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True,
                           check=True).stdout
    assert f"pmdtap{pid % 1_000_000}:" not in links
    addresses = subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True,
                               check=True).stdout
    assert f"pmdtap{pid % 1_000_000}" not in addresses


@pytest.mark.parametrize("argv", [
    ("--target", "pmd-pytcp"),
    ("--target", "pmd-pytcp-blocking", "-F", "2", "-T", "2"),
])
def test_tcp_rr_runs_exactly_the_transactions_asked(argv: tuple[str, ...]) -> None:
    status, values, err, pid = bench("tcp_rr", "-l", "-150", "-Q", "100", "-R", "300",
                                     *argv)
    assert status == 0, err
    assert values["num_transactions"] == "150"
    assert float(values["latency_min"]) > 0
    assert float(values["throughput"]) > 0
    assert_cleaned_up(pid)


def test_tcp_crr_opens_one_pmd_pytcp_connection_per_transaction_over_ipv6() -> None:
    status, values, err, pid = bench("tcp_crr", "--target", "pmd-pytcp", "-6", "-l", "-40")
    assert status == 0, err
    assert values["num_transactions"] == "40"
    assert values["remote_throughput"] == "0"  # neper's crr server counts nothing
    assert_cleaned_up(pid)


@pytest.mark.parametrize("workload", ["tcp_stream", "udp_stream"])
def test_stream_bytes_are_measured_by_the_pmd_pytcp_reader(workload: str) -> None:
    status, values, err, pid = bench(workload, "--target", "pmd-pytcp", "-l", "1")
    assert status == 0, err
    assert values["throughput_units"] == "Mbit/s"
    # the reader (pmd-pytcp's side) measures; local_throughput is its bits per second
    assert int(values["local_throughput"]) > 0
    assert int(values["num_samples"]) >= 2
    assert_cleaned_up(pid)


def test_maerts_is_refused_with_the_reason_and_the_device_still_removed() -> None:
    status, values, err, pid = bench("tcp_stream", "-M", "--target", "pmd-pytcp", "-l", "1")
    assert status == 1
    assert "send() buffers without limit" in err
    assert "throughput" not in values
    assert_cleaned_up(pid)


def test_client_or_server_mode_is_refused_before_anything_starts() -> None:
    status, _values, err, _pid = bench("tcp_rr", "--server", "--target", "pmd-pytcp")
    assert status != 0
    assert "-c/--server need --target kernel" in err


def test_missing_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pmd_pytcp", None)  # import raises ImportError
    with pytest.raises(NeperError, match=r"pip install pmd-pytcp==0\.3\.8"):
        peer_pytcp.PytcpTarget()


def test_without_cap_net_admin_the_error_says_what_is_needed() -> None:
    """capsh (libcap2-bin, installed by scripts/test) drops CAP_NET_ADMIN for the run."""
    command = (f"{sys.executable} -m rcunet bench tcp_rr --target pmd-pytcp -l -5 --nolog")
    result = subprocess.run(["capsh", "--drop=cap_net_admin", "--", "-c", command],
                            capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    assert result.returncode == 1
    assert "operation not permitted (needs root or CAP_NET_ADMIN)" in result.stderr
    assert "throughput=" not in result.stdout
