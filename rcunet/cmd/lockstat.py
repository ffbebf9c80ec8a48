"""``rcunet lockstat``: /proc/lock_stat of a running ``rcunet up --lockstat``, on demand,
through its control socket (``--control PATH``)."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--control", metavar="PATH", help="the control socket of rcunet up "
                        "(default: the only one under /run/rcunet)")


def run(args: argparse.Namespace) -> int:
    from rcunet.control import client

    try:
        answer = client.request(client.find_path(args.control), "lockstat")
    except client.ControlClientError as exc:
        print(f"rcunet lockstat: {exc}", file=sys.stderr)
        return 1
    print(answer.get("lock_stat", ""), end="")
    return 0
