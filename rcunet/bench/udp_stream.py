"""``rcunet bench udp_stream``: neper's udp_stream — the client sends -B byte datagrams on each
flow; the server (reader) measures throughput.

Flags, output and targets: ``rcunet.bench.neper`` and ``rcunet.bench.targets``."""

from __future__ import annotations

import argparse

WORKLOAD = "udp_stream"


def configure(parser: argparse.ArgumentParser) -> None:
    from rcunet.bench import neper

    neper.configure(parser, WORKLOAD)


def run(args: argparse.Namespace) -> int:
    from rcunet.bench import targets

    return targets.run(args)
