"""The ``rcunet`` command.

Each subcommand lives in its own module exposing ``configure(parser)`` and
``run(args) -> int``; the table below maps names to modules so that ``--help``
stays fast and a subcommand's dependencies load only when it runs.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Mapping

from rcunet import __version__
from rcunet import build as _build

# name -> (module, one-line help)
SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("rcunet.cmd.demo", "three in-process Hosts exchanging IPv4/IPv6 traffic"),
    "decode": ("rcunet.cmd.decode", "print a tcpdump-style line per frame of a pcap/pcapng file"),
    "bench": ("rcunet.cmd.bench", "run a benchmark (codec, tables, ...)"),
    "lab": ("rcunet.cmd.lab", "run a seed's scenario through whole Hosts, legacy vs modern"),
    "drill": ("rcunet.cmd.drill", "run packetdrill scripts against a Host on the virtual clock"),
    "up": ("rcunet.cmd.up", "run a Host with services on a real TAP/TUN device until SIGTERM"),
    "run": ("rcunet.cmd.run", "run an unmodified Python program on a Host of an in-process "
            "network"),
    "sim": ("rcunet.cmd.sim", "run unmodified Python programs on a simulated network, on "
            "virtual time, reproducible by seed"),
    "ss": ("rcunet.cmd.ss", "sockets of a running rcunet up, in ss's layout"),
    "nstat": ("rcunet.cmd.nstat", "counters of a running rcunet up, in nstat's layout"),
    "lockstat": ("rcunet.cmd.lockstat", "/proc/lock_stat of a running rcunet up --lockstat"),
}


#: The arguments being parsed, so nested dispatchers (bench, lab) import only the module
#: the command line names.
CURRENT_ARGV: list[str] = []


def chosen_after(word: str, names: Mapping[str, object]) -> str | None:
    """The first positional argument after ``word`` in ``CURRENT_ARGV``, if it is one of
    ``names`` (None: import every module, e.g. for ``--help``)."""
    argv = CURRENT_ARGV
    if word not in argv:
        return None
    rest = [arg for arg in argv[argv.index(word) + 1 :] if not arg.startswith("-")]
    return rest[0] if rest and rest[0] in names else None


def add_module_subcommands(parser: argparse.ArgumentParser, word: str,
                           table: dict[str, tuple[str, str]], metavar: str) -> None:
    """Subcommands of ``word`` (bench, lab) from ``table``: name -> (module, help).  Each
    module exposes ``configure(parser)`` and ``run(args)``; only the one named on the
    command line is imported (all of them for ``--help``)."""
    sub = parser.add_subparsers(dest=metavar.lower(), metavar=metavar, required=True)
    chosen = chosen_after(word, table)
    for name, (module_name, help_text) in table.items():
        child = sub.add_parser(name, help=help_text, description=help_text)
        child.set_defaults(_run_module=module_name)
        if chosen is None or chosen == name:
            importlib.import_module(module_name).configure(child)


def run_module_subcommand(args: argparse.Namespace) -> int:
    return int(importlib.import_module(args._run_module).run(args) or 0)


class UsageError(Exception):
    """A command-line mistake: printed as one line, exit status 2."""


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser; only the subcommand named in ``argv`` (or all of them, when
    ``argv`` is None) has its module imported to add its options."""
    CURRENT_ARGV[:] = argv or []
    chosen = _chosen_command(argv)
    parser = argparse.ArgumentParser(
        prog="rcunet",
        description="A userspace TCP/IP stack with a contention-free socket layer.",
    )
    parser.add_argument("--version", action="version",
                        version=f"rcunet {__version__}: {_build.describe()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module_name, help_text) in SUBCOMMANDS.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        sub_parser.set_defaults(_module=module_name)
        if chosen is None or chosen == name:
            importlib.import_module(module_name).configure(sub_parser)
    return parser


def _chosen_command(argv: list[str] | None) -> str | None:
    if argv is None:
        return None
    for arg in argv:
        if not arg.startswith("-"):
            return arg if arg in SUBCOMMANDS else None
    return None


def main(argv: list[str] | None = None) -> int:
    if argv is None:
        argv = sys.argv[1:]
    parser = build_parser(argv)
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 2
    module = importlib.import_module(args._module)
    try:
        return int(module.run(args) or 0)
    except UsageError as exc:
        print(f"rcunet {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rcunet {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
