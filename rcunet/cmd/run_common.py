"""What ``rcunet run`` and ``rcunet run --procs`` (cmd/run_procs.py) share: the
topologies, ``--impair``'s parser, a program run as ``python PROGRAM`` would run it, and
the ``--also`` threads."""

from __future__ import annotations

import json
import os
import re
import runpy
import shlex
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

_UNITS = {"": 1, "s": 1_000_000_000, "ms": 1_000_000, "us": 1_000, "ns": 1}
_RATES = {"bit": 1, "kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}


def _usage(message: str) -> Exception:
    from rcunet.cli import UsageError

    return UsageError(message)


def check_serve(specs: str) -> None:
    """``--serve`` checked before anything starts (a usage error names the problem)."""
    from rcunet.services import parse_specs

    try:
        parse_specs(specs)
    except ValueError as exc:
        raise _usage(f"--serve: {exc}") from None


def program_host(net: Any, name: str | None) -> Any:
    """The Host ``--host`` names (the topology's first without it); a usage error
    listing the topology's Hosts when it has none of that name."""
    host = net.host_named(name) if name else net.hosts[0]
    if host is None:
        raise _usage(f"--host {name!r}: the topology has "
                     f"{', '.join(h.name for h in net.hosts)}")
    return host


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
            if name in ("loss", "duplicate", "corrupt", "reorder", "ecn"):
                fields[name] = float(value[:-1]) / 100 if value.endswith("%") else float(value)
            elif name in ("delay", "jitter", "reorder_delay", "ce_threshold"):
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


def build_network(topology: str, impair: Any,
                  in_child: Callable[[int, str], bool] | None = None,
                  transport: str = "seqpacket", network: Any = None) -> Any:
    """The threaded Network a topology names (not started).  ``in_child(index, name)``:
    whether that Host lives in its own process (``Network.host_process``); the links
    to it are then inter-process links over ``transport``.  ``network``: build into
    this (empty) Network instead (``rcunet sim``'s, on its virtual clock)."""
    from rcunet.host.network import Network

    net = network if network is not None else Network(threaded=True)
    serial = iter(range(1 << 30))

    def make(name: str, forwarding: bool = False) -> Any:
        if in_child is not None and in_child(next(serial), name):
            return net.host_process(name, forwarding=forwarding)
        return net.host(name, forwarding=forwarding)

    link_options: dict[str, Any] = {"transport": transport} if in_child else {}
    if topology == "pair":
        a, b = make("a"), make("b")
        net.link(a, b, ["10.0.0.1/24", "fd00::1/64"], ["10.0.0.2/24", "fd00::2/64"],
                 impair=impair, **link_options)
        return net
    if topology == "routed":
        a, r, b = make("a"), make("r", forwarding=True), make("b")
        net.link(a, r, ["10.1.0.2/24", "fd01::2/64"], ["10.1.0.1/24", "fd01::1/64"],
                 impair=impair, **link_options)
        net.link(r, b, ["10.2.0.1/24", "fd02::1/64"], ["10.2.0.2/24", "fd02::2/64"],
                 impair=impair, **link_options)
        for host, v4, v6 in ((a, "10.1.0.1", "fd01::1"), (b, "10.2.0.1", "fd02::1")):
            host.add_route("default", via=v4)
            host.add_route("default6", via=v6)
        return net
    if topology.startswith("star:") and topology[5:].isdigit():
        segment = net.switch()
        for index in range(1, int(topology[5:]) + 1):
            net.attach(make(f"h{index}"), segment,
                       [f"10.0.0.{index}/24", f"fd00::{index:x}/64"], impair=impair,
                       **link_options)
        return net
    if os.path.isfile(topology):
        return _network_from_file(net, topology, impair, make, link_options)
    raise _usage(f"--topology {topology!r}: not pair, routed, star:N or a file")


def _network_from_file(net: Any, path: str, impair: Any, make: Callable[..., Any],
                       link_options: dict[str, Any]) -> Any:
    """{"hosts": [{"name": "a", "forwarding": false}, ...],
    "links": [{"ends": ["a", "b"], "addresses": [["10.0.0.1/24"], ["10.0.0.2/24"]],
               "impair": "loss=1%"}],
    "routes": [{"host": "a", "prefix": "default", "via": "10.0.0.2"}],
    "names": {"www": ["10.0.0.2"]}}"""
    try:
        with open(path) as file:
            spec = json.load(file)
        hosts = {h["name"]: make(h["name"], forwarding=bool(h.get("forwarding")))
                 for h in spec["hosts"]}
        for link in spec.get("links", []):
            left, right = (hosts[end] for end in link["ends"])
            addresses = link.get("addresses", [[], []])
            own = parse_impairment(link["impair"]) if "impair" in link else impair
            net.link(left, right, addresses[0], addresses[1], impair=own, **link_options)
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


def watch_also(threads: list[threading.Thread], main_done: threading.Event,
               interrupted: threading.Event) -> None:
    """Start the thread that stops the main program with KeyboardInterrupt once every
    one of ``threads`` (the --also programs, the children) has ended.  Call it from the
    main thread.  ``_thread.interrupt_main`` does nothing while SIGINT is ignored or
    left to the OS (a background job of a non-interactive shell inherits SIGINT
    ignored), so the main program's stop would never come: Python's own handler is put
    back first, as an interactive start would have it."""
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=_interrupt_after, args=(threads, main_done, interrupted),
                     name="rcunet-also-watch", daemon=True).start()


def _interrupt_after(threads: list[threading.Thread], main_done: threading.Event,
                     interrupted: threading.Event) -> None:
    import _thread

    for thread in threads:
        thread.join()
    if not main_done.is_set():
        interrupted.set()
        _thread.interrupt_main()


def _finish(also: list[tuple[threading.Thread, _Program]],
            diagnosis: Any = None) -> list[threading.Thread]:
    """Wait for the program's threads and the --also programs; an interrupt meant for
    a main program that had just ended is not ours to act on.  Returns the program's
    threads left blocked in rcunet socket calls (reported through ``diagnosis``)."""
    while True:
        try:
            stuck = _join_program_threads(diagnosis)
            if stuck:
                return stuck
            for thread, _program in also:
                thread.join()
            return []
        except KeyboardInterrupt:
            continue


def _join_program_threads(diagnosis: Any = None) -> list[threading.Thread]:
    """What the interpreter does at exit: wait for the program's non-daemon threads;
    but threads that all sit in one rcunet socket call each for a while are reported
    (run_diagnosis) and returned, not waited for for ever."""
    from rcunet.cmd.run_diagnosis import stuck_threads

    current = threading.current_thread()
    waited: dict[int, tuple[int, float]] = {}
    while True:
        alive = [t for t in threading.enumerate()
                 if t is not current and not t.daemon and t.is_alive()]
        if not alive:
            return []
        alive[0].join(0.25)
        if diagnosis is not None and stuck_threads(alive, waited, time.monotonic()):
            names = ", ".join(f'"{t.name}"' for t in alive)
            diagnosis.report(f"the program returned, but its threads {names} wait in "
                             "rcunet socket calls that nothing will complete")
            return alive


def leave_stuck(stuck: list[threading.Thread], status: int) -> int:
    """After the network closed: threads it woke end; if some still do not, the process
    exits now rather than wait for them (as the interpreter would, for ever)."""
    for thread in stuck:
        thread.join(2.0)
    status = status or 1
    left = [t.name for t in stuck if t.is_alive()]
    if left:
        print(f"rcunet run: exiting with threads {', '.join(left)} still blocked",
              file=sys.stderr)
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(status)
    return status
