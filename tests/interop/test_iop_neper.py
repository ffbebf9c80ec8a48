"""neper's protocol over TAP in both directions: ``rcunet bench WORKLOAD -c`` in the kernel
namespace against rcunet's neper service (``rcunet up --serve neper``), and our client on
the rcunet Host against ``rcunet bench WORKLOAD --server`` on Linux sockets in the
namespace.  Short runs; the figures (and runs of real neper binaries, which are never
installed here) belong in docs/BENCHMARKS.md."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest
from iop_support import Peer, unique_names, used

from rcunet.bench import neper, targets
from rcunet.services import start_services

WORKLOADS = ["tcp_rr", "tcp_crr", "tcp_stream", "udp_rr", "udp_stream"]


def fields_of(out: str) -> dict[str, str]:
    return dict(re.findall(r"^(\w+)=(.*)$", out, re.M))


@pytest.mark.parametrize("workload", WORKLOADS)
def test_kernel_neper_client_against_rcunet_neper_service(peer: Peer, workload: str) -> None:
    with start_services(peer.host, "neper:12866") as services:
        result = peer.run([sys.executable, "-m", "rcunet", "bench", workload, "--target",
                           "kernel", "-c", "-H", peer.rcunet[4], "-l", "1", "--nolog"],
                          timeout=60, check=False)
        out = result.stdout.decode()
        assert result.returncode == 0, out + result.stderr.decode()
        neper_service = services.services[0]
        assert neper_service.runs == 1  # type: ignore[attr-defined]
    fields = fields_of(out)
    if workload.endswith("stream"):
        assert int(fields["remote_throughput"]) > 0  # the rcunet side measured bits/s
    else:
        assert int(fields["num_transactions"]) > 0
    used("rcunet bench (kernel client)")


@pytest.mark.parametrize("workload", WORKLOADS)
def test_rcunet_client_against_a_kernel_neper_server(peer: Peer, workload: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    server = peer.ns.spawn([sys.executable, "-m", "rcunet", "bench", workload, "--server",
                            "--target", "kernel", "-H", peer.kernel[4], "--logtostderr"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stderr is not None
    for line in server.stderr:
        if b"listening on" in line:
            break
    else:
        pytest.fail(f"the server in the namespace did not start: {server.wait()}")
    parser = argparse.ArgumentParser()
    neper.configure(parser, workload)
    length = ["-l", "-50"] if workload.endswith("rr") else ["-l", "1"]
    opts = parser.parse_args(["-c", "-H", peer.kernel[4], "--nolog", "--target", "kernel",
                              *length])
    neper.adjust_stream_directions(opts)
    assert targets._run_client(opts, neper.Log(opts), peer.host.socket) == 0
    client = fields_of(capsys.readouterr().out)
    out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err.decode()
    kernel = fields_of(out.decode())
    assert client["remote_throughput"] == kernel["local_throughput"]  # from SER_BYE
    assert kernel["remote_throughput"] == client["local_throughput"]  # from CLI_DONE
    if workload.endswith("rr") and workload != "tcp_crr":
        assert client["num_transactions"] == kernel["num_transactions"] == "50"
    used("rcunet bench (kernel server)")


@pytest.mark.parametrize("workload", ["tcp_rr", "udp_stream"])
def test_rcunet_bench_target_tap_drives_a_kernel_neper_server(peer: Peer, workload: str) -> None:
    # the CLI path: `rcunet bench W --target tap -c` builds its own Host on a TAP device
    # of its own (here with --tap-peer configuring the kernel's side) in the namespace
    _ns_name, ifname = unique_names()
    server = peer.ns.spawn([sys.executable, "-m", "rcunet", "bench", workload, "--server",
                            "--target", "kernel", "--logtostderr"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert server.stderr is not None
    for line in server.stderr:
        if b"listening on" in line:
            break
    else:
        pytest.fail(f"the server in the namespace did not start: {server.wait()}")
    length = ["-l", "-50"] if workload.endswith("rr") else ["-l", "1"]
    result = peer.ns.run([sys.executable, "-m", "rcunet", "bench", workload, "--target", "tap",
                          "--tap", ifname, "--tap-address", "10.79.0.2/24", "--tap-peer",
                          "10.79.0.1/24", "-c", "-H", "10.79.0.1", "--nolog", *length],
                         timeout=60, check=False)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert b"--target tap" in result.stderr
    client = fields_of(result.stdout.decode())
    out, err = server.communicate(timeout=30)
    assert server.returncode == 0, err.decode()
    kernel = fields_of(out.decode())
    assert client["remote_throughput"] == kernel["local_throughput"]  # from SER_BYE
    assert kernel["remote_throughput"] == client["local_throughput"]  # from CLI_DONE
    if workload == "tcp_rr":
        assert client["num_transactions"] == kernel["num_transactions"] == "50"
    else:
        assert int(kernel["local_throughput"]) > 0  # the kernel read what rcunet wrote
    used("rcunet bench --target tap (kernel server)")


def test_rcunet_bench_target_tap_refuses_a_server_run_in_one_line() -> None:
    result = subprocess.run([sys.executable, "-m", "rcunet", "bench", "tcp_rr", "--target",
                             "tap", "--server", "--tap", "x", "--tap-address", "10.0.0.1/24"],
                            capture_output=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.count(b"\n") == 1 and b"rcunet up --serve neper" in result.stderr
