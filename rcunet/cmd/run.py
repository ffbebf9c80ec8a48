"""``rcunet run``: an unmodified Python program on a Host of an in-process network.

    rcunet run -- fetch.py http://b/bytes/1048576          # on a, b serves (--serve)
    rcunet run --impair loss=2%,delay=20ms -- fetch.py http://b/bytes/1048576
    rcunet run --host b --serve '' --also 'a client.py http://b:8000/' -m http.server 8000

The program's ``socket`` module (and everything built on it: http, urllib, asyncio,
socketserver, ssl, requests, ...) makes its Internet sockets on ``--host`` (drop-in
mode, ``rcunet.patched``); names are the Hosts' names.  The other Hosts run ``--serve``'s
services (those of ``rcunet up``).  ``--also 'HOST PROGRAM ARGS'`` runs another program on
HOST in a thread, once the program's Host listens (a TCP listener or a bound UDP port:
clients start when the server is up; ``sys.argv`` is the process's, so it is switched to
the --also program's then).  When every ``--also`` program has ended, the main program
gets KeyboardInterrupt (a server exits as on Ctrl-C) and the exit status is theirs.

Topologies: ``pair`` (a 10.0.0.1 -- b 10.0.0.2, the default), ``routed`` (a -- r -- b),
``star:N`` (h1..hN on one switch), or a JSON file (see docs/COMPAT.md).  ``--impair``
applies to every link, both directions.  Exit status: the program's (``sys.exit``), 1 for
an uncaught exception, 2 for a command-line mistake.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import runpy
import shlex
import sys
import threading
import traceback
from typing import Any

DEFAULT_SERVE = "echo:7,discard:9,udp-echo:7,http:80"
_UNITS = {"": 1, "s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_RATES = {"bit": 1, "kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", default="pair", metavar="NAME|FILE",
                        help="pair (default), routed, star:N, or a JSON topology file")
    parser.add_argument("--host", metavar="NAME",
                        help="the Host the program runs on (default: the first)")
    parser.add_argument("--impair", metavar="SPEC", default="",
                        help="every link, both ways: loss=2%%,delay=20ms,jitter=1ms,"
                        "duplicate=0.1%%,corrupt=0.1%%,reorder=1%%,rate=10mbit,limit=1000")
    parser.add_argument("--pcap", metavar="FILE", help="capture every link's frames to FILE")
    parser.add_argument("--serve", metavar="LIST", default=DEFAULT_SERVE,
                        help=f"services on the other Hosts (default {DEFAULT_SERVE}; "
                        "'' for none)")
    parser.add_argument("--also", metavar="'HOST PROGRAM ARGS'", action="append", default=[],
                        help="another program on HOST, in a thread (repeatable)")
    parser.add_argument("--counters", action="store_true",
                        help="print each Host's counters (nstat layout) at exit")
    parser.add_argument("-m", dest="module", metavar="MODULE",
                        help="run library module MODULE as a script (python -m)")
    parser.add_argument("program", nargs=argparse.REMAINDER,
                        help="PROGRAM [ARGS...] (after --), or the module's ARGS with -m")


def _usage(message: str) -> Exception:
    from rcunet.cli import UsageError

    return UsageError(message)


def parse_impairment(text: str) -> Any:
    """``loss=2%,delay=20ms,...`` -> ImpairmentConfig (None when empty)."""
    from rcunet.link.impair import ImpairmentConfig

    if not text.strip():
        return None
    fields: dict[str, Any] = {}
    for item in (part.strip() for part in text.split(",") if part.strip()):
        name, sep, value = item.partition("=")
        if not sep:
            raise _usage(f"--impair {item!r}: expected NAME=VALUE")
        try:
            if name in ("loss", "duplicate", "corrupt", "reorder"):
                fields[name] = float(value[:-1]) / 100 if value.endswith("%") else float(value)
            elif name in ("delay", "jitter", "reorder_delay"):
                match = re.fullmatch(r"([\d.]+)(s|ms|us|ns|)", value)
                if not match:
                    raise ValueError(value)
                fields[name] = int(float(match[1]) * _UNITS[match[2]])
            elif name == "rate":
                match = re.fullmatch(r"([\d.]+)(bit|kbit|mbit|gbit)", value.lower())
                if not match:
                    raise ValueError(value)
                fields["rate_bps"] = int(float(match[1]) * _RATES[match[2]])
            elif name in ("limit", "burst", "rate_queue", "seed"):
                fields[name] = int(value)
            else:
                raise _usage(f"--impair: unknown setting {name!r}")
        except ValueError:
            raise _usage(f"--impair {item!r}: bad value") from None
    try:
        return ImpairmentConfig(**fields)
    except ValueError as exc:
        raise _usage(f"--impair: {exc}") from None


def build_network(topology: str, impair: Any) -> Any:
    """The threaded Network a topology names (not started)."""
    from rcunet.host.network import Network

    if topology == "pair":
        net = Network(threaded=True)
        a, b = net.host("a"), net.host("b")
        net.link(a, b, ["10.0.0.1/24", "fd00::1/64"], ["10.0.0.2/24", "fd00::2/64"],
                 impair=impair)
        return net
    if topology == "routed":
        net = Network(threaded=True)
        a, r, b = net.host("a"), net.host("r", forwarding=True), net.host("b")
        net.link(a, r, ["10.1.0.2/24", "fd01::2/64"], ["10.1.0.1/24", "fd01::1/64"],
                 impair=impair)
        net.link(r, b, ["10.2.0.1/24", "fd02::1/64"], ["10.2.0.2/24", "fd02::2/64"],
                 impair=impair)
        for host, v4, v6 in ((a, "10.1.0.1", "fd01::1"), (b, "10.2.0.1", "fd02::1")):
            host.add_route("default", via=v4)
            host.add_route("default6", via=v6)
        return net
    if topology.startswith("star:") and topology[5:].isdigit():
        net = Network(threaded=True)
        segment = net.switch()
        for index in range(1, int(topology[5:]) + 1):
            net.attach(net.host(f"h{index}"), segment,
                       [f"10.0.0.{index}/24", f"fd00::{index:x}/64"], impair=impair)
        return net
    if os.path.isfile(topology):
        return _network_from_file(topology, impair)
    raise _usage(f"--topology {topology!r}: not pair, routed, star:N or a file")


def _network_from_file(path: str, impair: Any) -> Any:
    """{"hosts": [{"name": "a", "forwarding": false}, ...],
    "links": [{"ends": ["a", "b"], "addresses": [["10.0.0.1/24"], ["10.0.0.2/24"]],
               "impair": "loss=1%"}],
    "routes": [{"host": "a", "prefix": "default", "via": "10.0.0.2"}],
    "names": {"www": ["10.0.0.2"]}}"""
    from rcunet.host.network import Network

    try:
        with open(path) as file:
            spec = json.load(file)
        net = Network(threaded=True)
        hosts = {h["name"]: net.host(h["name"], forwarding=bool(h.get("forwarding")))
                 for h in spec["hosts"]}
        for link in spec.get("links", []):
            left, right = (hosts[end] for end in link["ends"])
            addresses = link.get("addresses", [[], []])
            own = parse_impairment(link["impair"]) if "impair" in link else impair
            net.link(left, right, addresses[0], addresses[1], impair=own)
        for route in spec.get("routes", []):
            hosts[route["host"]].add_route(route["prefix"], via=route.get("via"),
                                           dev=route.get("dev"))
        for name, addresses in spec.get("names", {}).items():
            net.add_name(name, *addresses)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise _usage(f"--topology {path}: {type(exc).__name__}: {exc}") from None
    return net


class _Program:
    """One program run as ``python PROGRAM ARGS`` / ``python -m MODULE ARGS`` would."""

    def __init__(self, argv: list[str], module: str | None) -> None:
        self.argv = argv
        self.module = module
        self.status = 0

    def run(self) -> int:
        saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
        try:
            if self.module:
                sys.argv = [self.module, *self.argv]
                sys.path[0] = os.getcwd()
                runpy.run_module(self.module, run_name="__main__", alter_sys=True)
            else:
                sys.argv = list(self.argv)
                sys.path[0] = os.path.dirname(os.path.abspath(self.argv[0]))
                runpy.run_path(self.argv[0], run_name="__main__")
        except SystemExit as exc:
            code = exc.code
            self.status = code if isinstance(code, int) else (0 if code is None else 1)
            if code is not None and not isinstance(code, int):
                print(code, file=sys.stderr)
        except KeyboardInterrupt:
            self.status = 130
        except BaseException:
            traceback.print_exc()
            self.status = 1
        finally:
            sys.argv = saved_argv
            if saved_path0 is not None:
                sys.path[0] = saved_path0
        return self.status


def _wait_listening(host: Any, timeout: float = 30.0) -> bool:
    """Until ``host`` has a TCP listener or a bound UDP socket (False after timeout)."""
    import time

    from rcunet.tables.entry import State

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with host.tcp._sockets_lock:  # the layers' socket sets change under these locks
            tcp = list(host.tcp.sockets)
        with host.udp._sockets_lock:
            udp = list(host.udp.sockets)
        if any(sk.state == State.LISTEN for sk in tcp) or any(sk.bound for sk in udp):
            return True
        time.sleep(0.01)  # polling a condition, not waiting for time to pass
    return False


def _also_thread(net: Any, text: str, server_host: list[Any]
                 ) -> tuple[threading.Thread, _Program]:
    from rcunet.api.patch import patched

    words = shlex.split(text)
    if len(words) < 2:
        raise _usage(f"--also {text!r}: expected 'HOST PROGRAM [ARGS...]'")
    host = net.host_named(words[0])
    if host is None:
        raise _usage(f"--also {text!r}: no host {words[0]!r}")
    module = words[2] if words[1] == "-m" and len(words) > 2 else None
    program = _Program(words[3:] if module else words[1:], module)

    def body() -> None:
        if not _wait_listening(server_host[0]):
            print(f"rcunet run: {server_host[0].name} never listened; starting --also "
                  f"{text!r} anyway", file=sys.stderr)
        with patched(host, this_thread=True):
            program.run()

    return threading.Thread(target=body, name=f"rcunet-also-{words[0]}", daemon=True), program


def _program_argv(args: argparse.Namespace) -> list[str]:
    argv = list(args.program)
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not args.module and not argv:
        raise _usage("give a program: rcunet run [options] -- PROGRAM [ARGS] (or -m MODULE)")
    if not args.module and not os.path.isfile(argv[0]):
        raise _usage(f"{argv[0]}: no such file")
    return argv


def run(args: argparse.Namespace) -> int:
    from rcunet.api.patch import patched
    from rcunet.host.counters import format_nstat
    from rcunet.link.pcap import PcapWriter
    from rcunet.services import parse_specs, start_services

    argv = _program_argv(args)
    try:
        parse_specs(args.serve)
    except ValueError as exc:
        raise _usage(f"--serve: {exc}") from None
    net = build_network(args.topology, parse_impairment(args.impair))
    host = net.host_named(args.host) if args.host else net.hosts[0]
    if host is None:
        raise _usage(f"--host {args.host!r}: the topology has "
                     f"{', '.join(h.name for h in net.hosts)}")
    also = [_also_thread(net, text, [host]) for text in args.also]
    pcap = PcapWriter(args.pcap) if args.pcap else None
    services = []
    main = _Program(argv, args.module)
    try:
        if pcap is not None:
            for link in net.links:
                link.tap = pcap
        net.start()
        for other in net.hosts:
            if other is not host and not other.tuning.ip_forward and args.serve:
                services.append(start_services(other, args.serve))
        with patched(host):
            for thread, _program in also:
                thread.start()
            main_done, interrupted = threading.Event(), threading.Event()
            if also:
                threading.Thread(target=_interrupt_after,
                                 args=([t for t, _ in also], main_done, interrupted),
                                 name="rcunet-also-watch", daemon=True).start()
            status = main.run()
            main_done.set()
            _finish(also)
        if interrupted.is_set():  # the --also programs ended first: theirs is the result
            status = next((p.status for _t, p in also if p.status), 0)
    finally:
        for service_set in services:
            service_set.stop()
        net.close()
        if pcap is not None:
            pcap.close()
    if args.counters:
        for each in net.hosts:
            print(f"# {each.name}", file=sys.stderr)
            print(format_nstat(each.counters.nonzero()), file=sys.stderr)
    return status


def _interrupt_after(threads: list[threading.Thread], main_done: threading.Event,
                     interrupted: threading.Event) -> None:
    import _thread

    for thread in threads:
        thread.join()
    if not main_done.is_set():
        interrupted.set()
        _thread.interrupt_main()


def _finish(also: list[tuple[threading.Thread, _Program]]) -> None:
    """Wait for the program's threads and the --also programs; an interrupt meant for
    a main program that had just ended is not ours to act on."""
    while True:
        try:
            _join_program_threads()
            for thread, _program in also:
                thread.join()
            return
        except KeyboardInterrupt:
            continue


def _join_program_threads() -> None:
    """What the interpreter does at exit: wait for the program's non-daemon threads."""
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon and thread.is_alive():
            thread.join()
