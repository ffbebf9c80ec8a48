"""``rcunet run --procs``: each Host of the topology in its own process.

    rcunet run --procs -- fetch.py http://b/bytes/1048576
    rcunet run --procs --topology routed --impair loss=1% -- fetch.py http://b/bytes/100000
    rcunet run --procs --host b --serve '' --also 'a client.py http://b:8000/' -m http.server 8000

The program's Host stays in this process (the program runs here, with this process's
stdin, stdout and exit status); every other Host of the topology is a ``HostProcess``
(rcunet/host/procs.py) in a child started with 'spawn', linked by inter-process links
(rcunet/link/ipc.py; ``--transport``).  A child runs ``--serve``'s services (not on a
forwarding Host, as in one process) and the ``--also`` programs meant for its Host, then
waits for the parent's stop.  A star's switch stays in this process: each child's
interface reaches its port over an inter-process link.

What keeps working as in one process:
  * names: every Host's name answers with its addresses, here and in each child (a
    ``NameBook`` is the child's hosts file);
  * ``--impair``: each sender impairs what it sends, in its own process;
  * ``--pcap``: one end of each link captures (this process's where it has one, else the
    child's, whose capture comes back in its outcome); the records are merged by time
    into one file at the end;
  * ``--counters``: the children's counters come back in their outcomes;
  * ``--also 'HOST ...'``: a program for a child's Host runs in that child once the
    program's Host listens; when every ``--also`` program has ended the main program gets
    KeyboardInterrupt, as in one process.

A child that dies (killed, crashed, or its function raised) is reported on stderr at once
with which Host and why; its links go down here (the program's connections then fail as
TCP says).  The exit status is the program's, or 1 when the program ended with 0 but a
Host's process had died.  At the end every child is stopped (killed after a grace period
if it does not end) and reaped; the links are unnamed socketpairs or memfds, so nothing
is left behind.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
from typing import Any

from rcunet.cmd.run_common import (
    _also_thread,
    _finish,
    _Program,
    _usage,
    _wait_listening,
    build_network,
    leave_stuck,
)

#: How long a child may take to build its Host and start its services.
READY_TIMEOUT = 60.0
#: How long the end of a run waits for a stopped child's outcome (close() has already
#: waited for it to end or killed it).
_JOIN_GRACE = 10.0


class NameBook:
    """A child's hosts file: the resolver's view of a Network (``names``, ``hosts``,
    ``host_named``) built from plain data, since the Network stays in the parent.
    Immutable after construction."""

    def __init__(self, names: dict[str, list[bytes]], host: Any) -> None:
        self.names = names
        self.hosts = [host]

    def host_named(self, name: str) -> None:
        return None  # every other Host is in ``names``


def serve_in_child(child: Any, serve: str, names: dict[str, list[bytes]],
                   programs: list[tuple[list[str], str | None]]) -> list[int]:
    """A child's function: services, then its ``--also`` programs or the parent's stop.
    Returns the programs' exit statuses."""
    from rcunet.services import start_services

    host = child.host
    host.network = NameBook(names, host)
    if not programs:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    services = start_services(host, serve) if serve and not host.tuning.ip_forward else None
    try:
        child.report("ready")
        if not programs:
            child.stopping.wait()
            return []
        if not _wait_for_go(child):
            return []
        return _run_programs(host, programs)
    finally:
        if services is not None:
            services.stop()


def _wait_for_go(child: Any) -> bool:
    """Until the parent says the program's Host listens (False: asked to stop first)."""
    while not child.stopping.is_set():
        try:
            if child.recv(timeout=0.1) == "go":
                return True
        except TimeoutError:
            continue
    return False


def _run_programs(host: Any, programs: list[tuple[list[str], str | None]]) -> list[int]:
    from rcunet.api.patch import patched

    runs = [_Program(argv, module) for argv, module in programs]

    def body(program: _Program) -> None:
        with patched(host, this_thread=True):
            program.run()

    threads = [threading.Thread(target=body, args=(program,), name="rcunet-also")
               for program in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return [program.status for program in runs]


# ============================================================================ the parent
class _Collector:
    """This process's taps: (timestamp, frame) records, merged with the children's at
    the end.  ``write`` from any thread: one ``list.append`` (atomic: the list's own
    lock on a free-threaded build, the GIL otherwise)."""

    def __init__(self) -> None:
        self.records: list[tuple[int, bytes]] = []

    def write(self, timestamp_ns: int, frame: bytes | bytearray | memoryview) -> None:
        self.records.append((timestamp_ns, bytes(frame)))


def _choose_captures(net: Any, collector: _Collector) -> None:
    """One capturing end per link: this process's where it has one, else the child's."""
    for link in net.links:
        link.tap = collector  # in-process links and the star's switch
    ours = {id(end) for end in net.ipc_ends}
    for end_a, end_b in net.ipc_links:
        mine = end_a if id(end_a) in ours else end_b if id(end_b) in ours else None
        if mine is not None:
            mine.tap = collector
            continue
        for process in net.processes:
            for ispec in process.interfaces:
                if ispec.endpoint is end_a:
                    ispec.capture = True


def _write_pcap(path: str, collector: _Collector, outcomes: list[Any]) -> None:
    from rcunet.link.pcap import PcapWriter, read_all

    records = list(collector.records)
    for outcome in outcomes:
        for data in outcome.pcaps.values():
            records.extend((r.timestamp_ns or 0, r.frame) for r in read_all(data))
    records.sort(key=lambda record: record[0])
    with PcapWriter(path) as writer:
        for timestamp, frame in records:
            writer.write(timestamp, frame)


def _name_tables(net: Any) -> dict[str, list[bytes]]:
    """Every Host's name -> its addresses, plus the topology's own names; the children
    get it as their hosts file, and the parent learns the children's names from it."""
    from rcunet.api.resolver import host_addresses

    names = {host.name.lower(): host_addresses(host) for host in net.hosts}
    names.update({process.name.lower(): process.addresses() for process in net.processes})
    names.update(net.names)
    for process in net.processes:
        net.names.setdefault(process.name.lower(), process.addresses())
    return names


class _Deaths:
    """Which children died or failed, reported on stderr once each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.reported: list[str] = []  # guarded-by: _lock

    def report(self, process: Any) -> None:
        failure = process.failure
        if failure is None:
            return
        with self._lock:
            if process.name in self.reported:
                return
            self.reported.append(process.name)
        what = "failed" if failure.startswith("its function raised") else "died"
        print(f"rcunet run: host {process.name}'s process ({process.pid}) {what}: "
              f"{failure}", file=sys.stderr, flush=True)


def _split_also(net: Any, host: Any, texts: list[str]
                ) -> tuple[list[str], dict[str, list[tuple[list[str], str | None]]]]:
    """--also texts for the program's Host (run here) and per child (run there)."""
    here: list[str] = []
    there: dict[str, list[tuple[list[str], str | None]]] = {}
    for text in texts:
        words = shlex.split(text)
        if len(words) < 2:
            raise _usage(f"--also {text!r}: expected 'HOST PROGRAM [ARGS...]'")
        if words[0].lower() == host.name.lower():
            here.append(text)
            continue
        process = net.process_named(words[0])
        if process is None:
            raise _usage(f"--also {text!r}: no host {words[0]!r}")
        module = words[2] if words[1] == "-m" and len(words) > 2 else None
        there.setdefault(process.name, []).append(
            (words[3:] if module else words[1:], module))
    return here, there


def run_in_processes(args: argparse.Namespace, argv: list[str], impair: Any) -> int:
    wanted = args.host.lower() if args.host else None

    def in_child(index: int, name: str) -> bool:
        return name.lower() != wanted if wanted is not None else index != 0

    net = build_network(args.topology, impair, in_child, args.transport)
    if not net.hosts:
        known = ", ".join(p.name for p in net.processes)
        net.close()
        raise _usage(f"--host {args.host!r}: the topology has {known}")
    host = net.hosts[0]
    try:
        here, there = _split_also(net, host, args.also)
    except Exception:
        net.close()
        raise
    collector = _Collector()
    if args.pcap:
        _choose_captures(net, collector)
    names = _name_tables(net)
    deaths = _Deaths()
    stopping = threading.Event()
    status = 1
    stuck: list[threading.Thread] = []
    try:
        net.start()
        for process in net.processes:
            process.on_exit = lambda p: None if stopping.is_set() else deaths.report(p)
            process.start(serve_in_child, args.serve, names, there.get(process.name, []))
        if _all_ready(net, deaths):
            status, stuck = _run_main(args, argv, net, host, here, there)
    finally:
        stopping.set()
        net.close()
    outcomes = []
    for process in net.processes:
        if process.process is None:
            continue
        try:
            outcome = process.join(timeout=_JOIN_GRACE)
        except TimeoutError:  # its monitor is still reaping it: say so, not hang
            print(f"rcunet run: host {process.name}'s process did not end", file=sys.stderr)
            status = status or 1
            continue
        deaths.report(process)
        outcomes.append(outcome)
    if args.pcap:
        _write_pcap(args.pcap, collector, outcomes)
    if args.counters:
        _print_counters(net, host)
    if status == 0 and deaths.reported:
        status = 1
    if stuck:
        return leave_stuck(stuck, status)
    return status


def _all_ready(net: Any, deaths: _Deaths) -> bool:
    from rcunet.host.procs import ChildFailed

    for process in net.processes:
        try:
            message = process.recv(timeout=READY_TIMEOUT)
        except (ChildFailed, TimeoutError) as exc:
            deaths.report(process)
            print(f"rcunet run: host {process.name} did not start: {exc}", file=sys.stderr)
            return False
        if message != "ready":
            print(f"rcunet run: host {process.name} said {message!r} at start",
                  file=sys.stderr)
            return False
    return True


def _run_main(args: argparse.Namespace, argv: list[str], net: Any, host: Any,
              here: list[str], there: dict[str, Any]) -> tuple[int, list[threading.Thread]]:
    """The program's status, and its threads left blocked in rcunet socket calls."""
    from rcunet.api import fork as dropin_fork
    from rcunet.api.patch import patched
    from rcunet.cmd.run_common import watch_also
    from rcunet.cmd.run_diagnosis import TIMEOUT_STATUS, Diagnosis, Watch, exit_now

    also = [_also_thread(net, text, [host]) for text in here]
    children = [net.process_named(name) for name in there]
    main = _Program(argv, args.module)
    if children:
        threading.Thread(target=_go_when_listening, args=(host, children),
                         name="rcunet-also-go", daemon=True).start()
    with patched(host):
        for thread, _program in also:
            thread.start()
        main_done, interrupted = threading.Event(), threading.Event()
        # the Host in this process: the children's sockets are theirs
        with Watch(Diagnosis([host]), args.timeout, interrupted,
                   lambda: exit_now(TIMEOUT_STATUS, lambda: _kill_children(net))) as watch:
            waiters = [t for t, _ in also] + [_joiner(p) for p in children]
            if waiters:
                watch_also(waiters, main_done, interrupted)
            status = main.run()
            dropin_fork.exit_if_child(status)
            main_done.set()
            stuck = _finish(also, watch.diagnosis)
            dropin_fork.wait_children()  # their sockets need this Host
        if stuck:
            return status, stuck
        statuses = [p.status for _t, p in also] + _child_statuses(children)
    if interrupted.is_set():  # the --also programs ended first: theirs is the result
        status = next((s for s in statuses if s), 0)
    return status, []


def _kill_children(net: Any) -> None:
    """The Hosts' processes, killed and reaped (a timed-out run's end)."""
    for process in net.processes:
        if process.process is not None:
            process.kill()
    for process in net.processes:
        if process.process is not None:
            try:
                process.join(timeout=_JOIN_GRACE)
            except TimeoutError:
                pass


def _go_when_listening(host: Any, children: list[Any]) -> None:
    from rcunet.host.procs import ChildFailed

    if not _wait_listening(host):
        print(f"rcunet run: {host.name} never listened; starting the --also programs "
              "anyway", file=sys.stderr)
    for process in children:
        try:
            process.send("go")
        except ChildFailed:
            pass  # reported by its exit


def _joiner(process: Any) -> threading.Thread:
    """A thread that ends when ``process`` does (for ``_interrupt_after``)."""
    thread = threading.Thread(target=process.join, name=f"rcunet-join-{process.name}",
                              daemon=True)
    thread.start()
    return thread


def _child_statuses(children: list[Any]) -> list[int]:
    """The --also programs' statuses in each child (1 for a child that died)."""
    statuses: list[int] = []
    for process in children:
        while True:
            try:
                outcome = process.join()
                break
            except KeyboardInterrupt:
                continue  # meant for a main program that had just ended
        if outcome.failure is not None:
            statuses.append(1)
        elif outcome.result:
            statuses.extend(outcome.result)
    return statuses


def _print_counters(net: Any, host: Any) -> None:
    from rcunet.host.counters import format_nstat

    print(f"# {host.name}", file=sys.stderr)
    print(format_nstat(host.counters.nonzero()), file=sys.stderr)
    for process in net.processes:
        if process.process is None or not process._finished.is_set():
            continue
        outcome = process.join(timeout=0)
        print(f"# {process.name}", file=sys.stderr)
        if outcome.counters:
            print(format_nstat({k: v for k, v in outcome.counters.items() if v}),
                  file=sys.stderr)
        else:
            print(f"(no counters: {outcome.failure})", file=sys.stderr)
