"""``rcunet bench WORKLOAD --target kernel -c`` in the kernel namespace against rcunet's
neper service over TAP: the control protocol and every data path work end to end (short
runs; the figures belong in docs/BENCHMARKS.md, not here)."""

from __future__ import annotations

import re
import sys

import pytest
from iop_support import Peer, used

from rcunet.services import start_services


@pytest.mark.parametrize("workload", ["tcp_rr", "tcp_crr", "tcp_stream", "udp_rr"])
def test_kernel_neper_client_against_rcunet_neper_service(peer: Peer, workload: str) -> None:
    with start_services(peer.host, "neper:12866") as services:
        result = peer.run([sys.executable, "-m", "rcunet", "bench", workload, "--target",
                           "kernel", "-c", "-H", peer.rcunet[4], "-l", "1", "--nolog"],
                          timeout=60, check=False)
        out = result.stdout.decode()
        assert result.returncode == 0, out + result.stderr.decode()
        neper_service = services.services[0]
        assert neper_service.runs == 1  # type: ignore[attr-defined]
    fields = dict(re.findall(r"^(\w+)=(.*)$", out, re.M))
    if workload == "tcp_stream":
        assert int(fields["remote_throughput"]) > 0  # the rcunet side measured bits/s
    else:
        assert int(fields["num_transactions"]) > 0
    used("rcunet bench (kernel client)")
