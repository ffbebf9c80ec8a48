"""``rcunet nstat [-a] [-z] [-s] [-r]``: the counters of a running ``rcunet up`` in
iproute2's nstat layout, through its control socket (``--control PATH``)."""

from __future__ import annotations

import argparse
import sys


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-a", "--ignore", action="store_true",
                        help="dump absolute values of counters (ignore the history)")
    parser.add_argument("-z", "--zeros", action="store_true", help="show zero counters too")
    parser.add_argument("-s", "--noupdate", action="store_true",
                        help="do not update the history")
    parser.add_argument("-r", "--reset", action="store_true",
                        help="reset the history (print since the daemon started)")
    parser.add_argument("--control", metavar="PATH", help="the control socket of rcunet up "
                        "(default: the only one under /run/rcunet)")


def run(args: argparse.Namespace) -> int:
    from rcunet.control import client, nstat

    try:
        path = client.find_path(args.control)
        answer = client.request(path, "nstat")
    except client.ControlClientError as exc:
        print(f"rcunet nstat: {exc}", file=sys.stderr)
        return 1
    values = {k: int(v) for k, v in answer.get("counters", {}).items()}
    history_file = nstat.history_path(path)
    history = None if args.ignore or args.reset else nstat.load_history(history_file)
    if history and any(values.get(k, 0) < v for k, v in history.items()):
        history = None  # a daemon restarted since: its counters started again at zero
    if not args.noupdate:  # before printing: a reader that stops early (head) still
        try:               # moves the history on, as nstat does
            nstat.save_history(history_file, values)
        except OSError as exc:
            print(f"rcunet nstat: cannot save history {history_file}: {exc.strerror}",
                  file=sys.stderr)
    print(nstat.render(values, history, args.zeros))
    return 0
