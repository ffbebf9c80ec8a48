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

``--procs`` puts every Host but the program's in its own child process, linked by
inter-process links (cmd/run_procs.py): the same options, outputs and exit status.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading

from rcunet.cmd.run_common import (
    _also_thread,
    _finish,
    _Program,
    _usage,
    build_network,
    check_serve,
    leave_stuck,
    parse_impairment,
    program_host,
    watch_also,
)
from rcunet.cmd.run_diagnosis import TIMEOUT_STATUS, Diagnosis, Watch, exit_now

DEFAULT_SERVE = "echo:7,discard:9,udp-echo:7,http:80"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--topology", default="pair", metavar="NAME|FILE",
                        help="pair (default), routed, star:N, or a JSON topology file")
    parser.add_argument("--host", metavar="NAME",
                        help="the Host the program runs on (default: the first)")
    parser.add_argument("--impair", metavar="SPEC", default="",
                        help="every link, both ways: loss=2%%,delay=20ms,jitter=1ms,"
                        "duplicate=0.1%%,corrupt=0.1%%,reorder=1%%,rate=10mbit,limit=1000,"
                        "ecn=1%% (CE instead of a drop for ECT packets),"
                        "ce_threshold=1ms (CE past that queueing delay)")
    parser.add_argument("--pcap", metavar="FILE", help="capture every link's frames to FILE")
    parser.add_argument("--serve", metavar="LIST", default=DEFAULT_SERVE,
                        help=f"services on the other Hosts (default {DEFAULT_SERVE}; "
                        "'' for none)")
    parser.add_argument("--also", metavar="'HOST PROGRAM ARGS'", action="append", default=[],
                        help="another program on HOST, in a thread (repeatable)")
    parser.add_argument("--counters", action="store_true",
                        help="print each Host's counters (nstat layout) at exit")
    parser.add_argument("--timeout", type=float, metavar="SECONDS",
                        help="stop the program after SECONDS (exit status 124), printing "
                        "each thread's stack and each socket's state first")
    parser.add_argument("--procs", action="store_true",
                        help="each Host but the program's in its own child process, "
                        "linked by inter-process links (rcunet/host/procs.py)")
    parser.add_argument("--transport", choices=("seqpacket", "ring"), default="seqpacket",
                        help="--procs: the inter-process link (default seqpacket)")
    # -m takes the rest of the line, options included, as ``python -m`` does: the
    # module's own options (-m unittest -v) are never read as rcunet's.
    parser.add_argument("-m", dest="module", metavar="MODULE [ARGS]", nargs=argparse.REMAINDER,
                        help="run library module MODULE as a script (python -m); every "
                        "later argument is the module's")
    parser.add_argument("program", nargs=argparse.REMAINDER,
                        help="PROGRAM [ARGS...] (after --)")


def _program_argv(args: argparse.Namespace) -> list[str]:
    """The program's arguments; ``args.module`` becomes the module's name (or None)."""
    argv = list(args.program)
    if args.module is not None:  # -m MODULE ARGS...: ARGS are the module's, all of them
        if not args.module:
            raise _usage("-m: give a module: rcunet run [options] -m MODULE [ARGS]")
        # argparse ends -m's list at a '--' and leaves it and the rest to ``program``:
        # the module gets them verbatim, as from ``python -m``
        args.module, argv = args.module[0], [*args.module[1:], *argv]
        return argv
    if argv and argv[0] == "--":
        argv = argv[1:]
    if not argv:
        raise _usage("give a program: rcunet run [options] -- PROGRAM [ARGS] (or -m MODULE)")
    if not os.path.isfile(argv[0]):
        raise _usage(f"{argv[0]}: no such file")
    return argv


def run(args: argparse.Namespace) -> int:
    from rcunet.api import fork as dropin_fork
    from rcunet.api.patch import patched
    from rcunet.host.counters import format_nstat
    from rcunet.link.pcap import PcapWriter
    from rcunet.services import start_services

    argv = _program_argv(args)
    if args.timeout is not None and not args.timeout > 0:
        raise _usage("--timeout: give a number of seconds above 0")
    check_serve(args.serve)
    impair = parse_impairment(args.impair)
    if args.procs:
        from rcunet.cmd.run_procs import run_in_processes

        return run_in_processes(args, argv, impair)
    net = build_network(args.topology, impair)
    host = program_host(net, args.host)
    also = [_also_thread(net, text, [host]) for text in args.also]
    pcap = PcapWriter(args.pcap) if args.pcap else None
    services = []
    main = _Program(argv, args.module)
    stuck: list[threading.Thread] = []
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
            diagnosis = Diagnosis(net.hosts)
            with Watch(diagnosis, args.timeout, interrupted,
                       lambda: exit_now(TIMEOUT_STATUS)):
                if also:
                    watch_also([t for t, _ in also], main_done, interrupted)
                status = main.run()
                dropin_fork.exit_if_child(status)
                main_done.set()
                stuck = _finish(also, diagnosis)
                dropin_fork.wait_children()  # their sockets need this Host
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
    if stuck:
        return leave_stuck(stuck, status)
    return status
