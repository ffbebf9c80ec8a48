"""``rcunet bench tcp_stream``: neper's tcp_stream — the client writes -B byte chunks on each
TCP flow; the server (reader) measures throughput.

Flags, output and targets: ``rcunet.bench.neper`` and ``rcunet.bench.targets``."""

from __future__ import annotations

import argparse

WORKLOAD = "tcp_stream"


def configure(parser: argparse.ArgumentParser) -> None:
    from rcunet.bench import neper

    neper.configure(parser, WORKLOAD)


def run(args: argparse.Namespace) -> int:
    from rcunet.bench import targets

    return targets.run(args)
