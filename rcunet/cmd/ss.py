"""``rcunet ss [-t|-u] [-l] [-a] [-i] [-s] [-n]``: the sockets of a running ``rcunet up``
in iproute2's ss layout, through its control socket (``--control PATH``)."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-t", "--tcp", action="store_true", help="display TCP sockets")
    parser.add_argument("-u", "--udp", action="store_true", help="display UDP sockets")
    parser.add_argument("-l", "--listening", action="store_true",
                        help="display listening sockets")
    parser.add_argument("-a", "--all", action="store_true",
                        help="display all sockets (listening and not)")
    parser.add_argument("-i", "--info", action="store_true", help="show internal TCP "
                        "information")
    parser.add_argument("-s", "--summary", action="store_true", help="show socket usage "
                        "summary")
    parser.add_argument("-n", "--numeric", action="store_true",
                        help="don't resolve service names (always the case)")
    parser.add_argument("--control", metavar="PATH", help="the control socket of rcunet up "
                        "(default: the only one under /run/rcunet)")


def run(args: argparse.Namespace) -> int:
    from rcunet.control import client, ss

    try:
        answer = client.request(client.find_path(args.control), "ss")
    except client.ControlClientError as exc:
        print(f"rcunet ss: {exc}", file=sys.stderr)
        return 1
    rows = answer.get("sockets", [])
    if args.summary:
        print(ss.summary(rows))
        return 0
    chosen = ss.select(rows, tcp=args.tcp, udp=args.udp, listening=args.listening,
                       everything=args.all)
    print(ss.table(chosen, show_info=args.info))
    return 0
