"""``rcunet sim``: ``rcunet run`` on virtual time, reproducible by seed.

    rcunet sim --seed 7 --impair loss=5%,delay=50ms -- fetch.py http://b/bytes/1048576
    rcunet sim --seed 7 --check-determinism -- fetch.py http://b/bytes/1048576
    rcunet sim --until 7200 --counters -m myserver --port 80

Every option of ``rcunet run`` (topology, host, impair, pcap, serve, also, counters; not
``--procs``: a simulation keeps every Host in one process), plus:

* ``--seed N``: the seed of everything random (scheduling, impairments, ISNs, ports);
* ``--until T``: stop at T simulated seconds (exit status 124 if the program still runs);
* ``--faults FILE``: partitions, crashes and restarts, impairment changes and clock
  skews at simulated times (rcunet/sim/faults.py has the format);
* ``--seed-random``: the program's ``random``, ``os.urandom``, ``uuid4`` and ``secrets``
  from the seed too;
* ``--check-determinism``: run twice in child processes, compare their output and pcap;
* ``--cpu-limit S``: the real CPU seconds a thread may run without reaching a blocking
  point before the run stops (a busy loop).

The program's threads run one at a time under the seeded scheduler, on the network's
virtual clock (docs/SIMULATION.md).  Exit status: the program's; 1 when it raised (with
its traceback, the simulated time and the seed) or when the simulation stopped it (a
deadlock, a busy loop, a refused call: one report naming it); 130 after Ctrl-C, which
prints every thread's stack and unwinds them.

A run is reproducible in one interpreter only with one ``PYTHONHASHSEED`` (string and
bytes hashes order sets and seed rcunet's keyed hashes): ``rcunet sim`` started as a
command re-executes itself with ``PYTHONHASHSEED`` derived from ``--seed`` when it is not
set so already.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import runpy
import shlex
import subprocess
import sys
import tempfile
from typing import Any

from rcunet.cmd import run as run_cmd
from rcunet.cmd.run_common import (
    _usage,
    build_network,
    check_serve,
    parse_impairment,
    program_host,
)

UNTIL_STATUS = 124  # as timeout(1)


def configure(parser: argparse.ArgumentParser) -> None:
    run_cmd.configure(parser)
    parser.add_argument("--seed", type=int, default=1, help="the seed (default 1)")
    parser.add_argument("--until", type=float, metavar="SECONDS",
                        help="stop at this simulated time")
    parser.add_argument("--check-determinism", action="store_true",
                        help="run twice (child processes) and compare output and pcap")
    parser.add_argument("--faults", metavar="FILE",
                        help="faults on a timeline: partition, heal, crash, restart, "
                        "impair, skew (docs/SIMULATION.md)")
    parser.add_argument("--seed-random", action="store_true",
                        help="the program's random, os.urandom, uuid4 and secrets from "
                        "the seed too")
    parser.add_argument("--cpu-limit", type=float, default=10.0, metavar="SECONDS",
                        help="real CPU seconds a thread may run without blocking "
                        "(default 10)")


def hash_seed(seed: int) -> str:
    return str(seed % 4_294_967_295)


def _reexec_with_hash_seed(seed: int) -> None:
    """Started as ``rcunet sim ...`` with another PYTHONHASHSEED: start again with ours."""
    wanted = hash_seed(seed)
    if os.environ.get("PYTHONHASHSEED") == wanted or sys.argv[1:2] != ["sim"]:
        return
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, "-m", "rcunet", *sys.argv[1:]],
              dict(os.environ, PYTHONHASHSEED=wanted))


def run(args: argparse.Namespace) -> int:
    if args.procs:
        raise _usage("--procs: a simulation keeps every Host in this process")
    argv = run_cmd._program_argv(args)
    check_serve(args.serve)
    impair = parse_impairment(args.impair)
    if args.check_determinism:
        return check_determinism(args, argv)
    _reexec_with_hash_seed(args.seed)
    return simulate(args, argv, impair)


def simulate(args: argparse.Namespace, argv: list[str], impair: Any) -> int:
    from rcunet.host.counters import format_nstat
    from rcunet.link.pcap import PcapWriter
    from rcunet.services import start_services
    from rcunet.sim import Interrupted, Simulation, SimulationError

    sim = Simulation(args.seed, cpu_bound=args.cpu_limit, seed_random=args.seed_random)
    net = build_network(args.topology, impair, network=sim.network)
    host = program_host(net, args.host)
    also = [_also(sim, text, host) for text in args.also]
    pcap = PcapWriter(args.pcap) if args.pcap else None
    if pcap is not None:
        for link in net.links:
            link.tap = pcap
    for other in net.hosts:
        if other is not host and not other.tuning.ip_forward and args.serve:
            sim.spawn(other, start_services, other, args.serve, name=f"serve-{other.name}",
                      daemon=True)
    main = sim.spawn(host, run_script, argv, args.module, name="main")
    if args.faults:
        from rcunet.sim.faults import FaultError

        try:
            sim.load_scenario(args.faults)
        except FaultError as exc:
            sim.close()
            raise _usage(f"--faults {exc}") from None
    status = 0
    try:
        try:
            reached = sim.run(args.until, condition=lambda: bool(also) and all(
                p.done for p in also))
            if not main.done and also and all(p.done for p in also):
                sim.interrupt(main, KeyboardInterrupt())  # as rcunet run: they are done
                reached = sim.run(args.until)
                status = next((p.status for p in also if p.status), 0)
            elif main.done:
                status = main.status or 0
            if not reached and not main.done:
                print(f"rcunet sim: --until {args.until:g} s reached; the program still "
                      f"runs (seed {args.seed})", file=sys.stderr)
                status = UNTIL_STATUS
        finally:
            sim.close()
    except SimulationError as exc:
        print(f"rcunet sim: {exc}\nrcunet sim: stopped at simulated time {sim.now:.6f} s "
              f"(seed {args.seed})", file=sys.stderr)
        status = 130 if isinstance(exc, Interrupted) else 1
    finally:
        if pcap is not None:
            pcap.close()
    if args.counters:
        for each in net.hosts:
            print(f"# {each.name}", file=sys.stderr)
            print(format_nstat(each.counters.nonzero()), file=sys.stderr)
        rate = sim.now / sim.real_seconds if sim.real_seconds else 0.0
        print(f"# simulated {sim.now:.3f} s in {sim.real_seconds:.3f} s real: "
              f"{rate:.1f} simulated seconds per real second", file=sys.stderr)
    return status


def run_script(argv: list[str], module: str | None) -> None:
    """``python PROGRAM ARGS`` / ``python -m MODULE ARGS``, in the calling thread; its
    exceptions (and SystemExit) are the caller's (``Program`` reports them)."""
    saved_argv, saved_path0 = sys.argv, sys.path[0] if sys.path else None
    try:
        if module:
            sys.argv = [module, *argv]
            sys.path[0] = os.getcwd()
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    finally:
        sys.argv = saved_argv
        if saved_path0 is not None:
            sys.path[0] = saved_path0


def _also(sim: Any, text: str, server: Any) -> Any:
    from rcunet.cmd.run_common import _wait_listening

    words = shlex.split(text)
    if len(words) < 2:
        raise _usage(f"--also {text!r}: expected 'HOST PROGRAM [ARGS...]'")
    host = sim.network.host_named(words[0])
    if host is None:
        raise _usage(f"--also {text!r}: no host {words[0]!r}")
    module = words[2] if words[1] == "-m" and len(words) > 2 else None
    argv = words[3:] if module else words[1:]

    def body() -> None:
        if not _wait_listening(server):  # on the virtual clock: 30 simulated seconds
            print(f"rcunet sim: {server.name} never listened; starting --also {text!r} "
                  "anyway", file=sys.stderr)
        run_script(argv, module)

    return sim.spawn(host, body, name=f"also-{words[0]}")


# -- --check-determinism -------------------------------------------------------------------
def _child_argv(args: argparse.Namespace, argv: list[str], pcap: str) -> list[str]:
    """The same run, as a command line (without --check-determinism and --counters)."""
    command = [sys.executable, "-m", "rcunet", "sim", "--seed", str(args.seed),
               "--topology", args.topology, "--impair", args.impair, "--serve", args.serve,
               "--cpu-limit", str(args.cpu_limit), "--pcap", pcap]
    if args.host:
        command += ["--host", args.host]
    if args.seed_random:
        command.append("--seed-random")
    if args.faults:
        command += ["--faults", os.path.abspath(args.faults)]
    if args.until is not None:
        command += ["--until", repr(args.until)]
    for text in args.also:
        command += ["--also", text]
    if args.module:
        return [*command, "-m", args.module, *argv]
    return [*command, "--", *argv]


def check_determinism(args: argparse.Namespace, argv: list[str]) -> int:
    """Run twice, compare stdout, stderr and the pcap byte for byte; 0 when identical."""
    runs = []
    with tempfile.TemporaryDirectory(prefix="rcunet-sim-") as tmp:
        for index in (1, 2):
            pcap = os.path.join(tmp, f"run{index}.pcap")
            done = subprocess.run(_child_argv(args, argv, pcap), capture_output=True,
                                  env=dict(os.environ, PYTHONHASHSEED=hash_seed(args.seed)),
                                  check=False)
            with open(pcap, "rb") as file:
                capture = file.read()
            runs.append((done.returncode, done.stdout, done.stderr, capture))
            if index == 1:
                sys.stdout.buffer.write(done.stdout)
                sys.stdout.flush()
                sys.stderr.buffer.write(done.stderr)
                sys.stderr.flush()
    first, second = runs
    report = []
    for label, one, two in (("exit status", first[0], second[0]),
                            ("stdout", first[1], second[1]), ("stderr", first[2], second[2]),
                            ("pcap", first[3], second[3])):
        if one != two:
            report.append(label)
    digest = hashlib.sha256(first[3]).hexdigest()[:16]
    if report:
        print(f"rcunet sim: NOT deterministic (seed {args.seed}): {', '.join(report)} "
              "differ between two runs", file=sys.stderr)
        return 1
    print(f"rcunet sim: deterministic (seed {args.seed}): exit status {first[0]}, "
          f"stdout {len(first[1])} B, stderr {len(first[2])} B, pcap {len(first[3])} B "
          f"sha256 {digest}... identical in two runs", file=sys.stderr)
    return int(first[0])
