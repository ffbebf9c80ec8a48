"""A neper server's own flags for ``rcunet up --serve neper`` (``--neper FLAGS``).

A neper server binary takes the flags that CLI_HELLO does not carry: ``-T`` (its
threads), ``-F`` (the flows SER_ACK reports), ``-P`` and ``--num-ports`` (its data
ports), ``-Q``/``-R`` (the RR sizes), ``-B``, ``-M``/``-r``/``-w`` (tcp_stream's
directions), ``-D``, ``--no-delay``, ``--listen-backlog``, ``-l`` (what SER_ACK says)
and ``--magic``.  ``rcunet up`` runs all five workloads from one port, so the flags are
read once per workload with that workload's neper parser (``rcunet.bench.neper``): a
flag applies to the workloads that have it (``-Q 64`` to the three RR tests, ``-M`` to
tcp_stream), and a flag no workload has, a bad value, or one that makes no sense for a
daemon (``-c``, ``-H``, ``-C``: the control port is ``--serve neper:PORT``, ``-4``/``-6``:
the family is the client's, ``-A``, ``-s``, ``-n``, ``--pin-cpu``, rcunet's ``--target``
and ``--tap*``) is a usage error at start, one line.
"""

from __future__ import annotations

import argparse
import shlex
from dataclasses import dataclass, replace
from typing import Any

WORKLOADS = ("tcp_rr", "tcp_crr", "tcp_stream", "udp_rr", "udp_stream")

#: Flags a daemon refuses, with why (as a neper user would write them).
REFUSED = {
    "-c": "a server's flags", "--client": "a server's flags",
    "-H": "rcunet up serves on its --address", "--host": "rcunet up serves on its --address",
    "-C": "the control port is --serve neper:PORT",
    "--control-port": "the control port is --serve neper:PORT",
    "-4": "the family is the client's", "-6": "the family is the client's",
    "--ipv4": "the family is the client's", "--ipv6": "the family is the client's",
    "-A": "not kept by the daemon", "--all-samples": "not kept by the daemon",
    "-s": "the daemon does not end", "--suicide-length": "the daemon does not end",
    "-n": "the daemon runs", "--dry-run": "the daemon runs",
    "--pin-cpu": "not for the daemon", "--target": "rcunet up is the target",
    "--tuning": "use rcunet up --preset", "--server": "it is the server",
    "--tap": "rcunet up has its own device", "--tap-address": "rcunet up --address",
    "--tap-peer": "not for the daemon", "--tap-route": "rcunet up --route",
}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would exit the daemon
        raise ValueError(message)


@dataclass(frozen=True)
class ServerFlags:
    """The parsed flags: one neper options namespace per workload, and which of the
    flags that change the service's own behaviour were given."""

    text: str
    options: dict[str, argparse.Namespace]
    threads_given: bool
    data_port_given: bool

    def magic(self, workload: str) -> int:
        return int(self.options[workload].magic)

    def data_port(self, workload: str, control_port: int) -> int:
        """``-P`` when given, else the control port + 1 (neper's 12866/12867 pair)."""
        if self.data_port_given:
            return int(self.options[workload].port)
        return control_port + 1


def _refused(tokens: list[str]) -> str | None:
    for token in tokens:
        name = token.split("=", 1)[0]
        if name in REFUSED:
            return f"{name}: {REFUSED[name]}"
        if len(name) > 2 and name[:2] in REFUSED and not name.startswith("--"):
            return f"{name[:2]}: {REFUSED[name[:2]]}"  # -H10.0.0.1
    return None


def _given(tokens: list[str], short: str, long: str) -> bool:
    return any(t == short or t == long or t.startswith(long + "=")
               or (t.startswith(short) and len(t) > 2 and not t.startswith("--"))
               for t in tokens)


def parse(text: str) -> ServerFlags:
    """``'-T 2 --num-ports 2 -R 64'`` -> ServerFlags; ValueError with one line."""
    from rcunet.bench import neper

    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"--neper {text!r}: {exc}") from None
    why = _refused(tokens)
    if why is not None:
        raise ValueError(f"--neper: {why}")
    options: dict[str, argparse.Namespace] = {}
    unknown_everywhere: set[str] | None = None
    for workload in WORKLOADS:
        parser = _Parser(prog=f"neper {workload}", add_help=False)
        neper.configure(parser, workload)
        try:
            opts, extra = parser.parse_known_args(tokens)
        except ValueError as exc:
            raise ValueError(f"--neper ({workload}): {exc}") from None
        flags = {t for t in extra if t.startswith("-")}
        unknown_everywhere = flags if unknown_everywhere is None else \
            unknown_everywhere & flags
        opts.server, opts.client, opts.target = True, False, "kernel"
        try:
            neper.validate(opts)
        except Exception as exc:  # neper's check_options: a one-line usage error
            raise ValueError(f"--neper ({workload}): {exc}") from None
        neper.adjust_stream_directions(opts)
        options[workload] = opts
    if unknown_everywhere:
        raise ValueError(f"--neper: no neper server takes {' '.join(sorted(unknown_everywhere))}")
    return ServerFlags(text, options, _given(tokens, "-T", "--num-threads"),
                       _given(tokens, "-P", "--port"))


def plan_with(flags: ServerFlags, workload: str, family: int, client_threads: int,
              max_threads: int) -> Any:
    """The server's Plan for one client from its flags: ``-T`` when given (else the
    client's, capped as without flags)."""
    from rcunet.bench.targets import plan_from

    opts = flags.options[workload]
    plan = plan_from(opts)
    threads = opts.num_threads if flags.threads_given else client_threads
    return replace(plan, family=family, num_threads=max(1, min(threads, max_threads)))
