"""``rcunet up``: run an rcunet Host on a real TAP or TUN device until SIGINT/SIGTERM.

    rcunet up --tap tap0 --address 10.77.0.2/24 --address fd77::2/64 \\
              --route default via 10.77.0.1 --serve echo:7,udp-echo:7,http:80

The device is created when absent (and brought up); the kernel's side of it is yours
to configure (``ip addr add 10.77.0.1/24 dev tap0``).  Exit status: 0 after a clean
shutdown (services stopped, connections closed), 1 when the device cannot be opened
(no root / CAP_NET_ADMIN, no /dev/net/tun) or is lost while running (deleted), 2 for a
command-line mistake.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import Any

DEFAULT_SERVE = "echo:7,discard:9,udp-echo:7,udp-discard:9,http:80"
CAP_NET_ADMIN = 12


def configure(parser: argparse.ArgumentParser) -> None:
    device = parser.add_mutually_exclusive_group(required=True)
    device.add_argument("--tap", metavar="NAME", help="attach to TAP device NAME (Ethernet)")
    device.add_argument("--tun", metavar="NAME", help="attach to TUN device NAME (IP only)")
    parser.add_argument("--address", metavar="ADDR/PREFIX", action="append", default=[],
                        help="an address of the rcunet host (repeat for more)")
    parser.add_argument("--route", metavar="ROUTE", nargs="+", action="append", default=[],
                        help="'PREFIX via GW' or 'PREFIX dev' (PREFIX may be 'default' "
                        "or 'default6'); repeat for more")
    parser.add_argument("--serve", metavar="LIST", default=DEFAULT_SERVE,
                        help=f"services NAME:PORT,... (default {DEFAULT_SERVE}; "
                        "names: echo, discard, udp-echo, udp-discard, http, neper); "
                        "'' for none")
    parser.add_argument("--neper", metavar="FLAGS", default="",
                        help="for --serve neper: a neper server's own flags, as its binary "
                        "takes them (-T, -F, -P, --num-ports, -Q/-R, -B, -M/-r/-w, -D, "
                        "--no-delay, --magic, -l), e.g. --neper '-T 2 --num-ports 2' (one "
                        "flag alone: --neper=-M); each applies to the workloads that "
                        "have it")
    parser.add_argument("--preset", choices=("modern", "legacy"), default="modern",
                        help="tuning preset (default modern)")
    parser.add_argument("--lockstat", action="store_true",
                        help="collect lock statistics; print /proc/lock_stat at exit")
    parser.add_argument("--pcap", metavar="FILE", help="capture every frame to FILE")
    parser.add_argument("--control", metavar="PATH",
                        help="control socket for rcunet ss/nstat/lockstat (default "
                             "/run/rcunet/DEVICE.sock; 'none' for no socket)")
    parser.add_argument("--queues", type=int, default=1, metavar="N",
                        help="device queues (multi-queue TAP/TUN) and receive workers")
    parser.add_argument("--mtu", type=int, default=1500, help="MTU (default 1500)")
    parser.add_argument("--mac", metavar="MAC", help="rcunet's MAC on a TAP device "
                        "(default: random, locally administered)")


def _usage(message: str) -> Exception:
    from rcunet.cli import UsageError

    return UsageError(message)


def parse_route(words: list[str]) -> tuple[str, str | None, bool]:
    """``['default', 'via', '10.77.0.1']`` -> (prefix, gateway, on_link)."""
    if len(words) == 1 and " " in words[0]:
        words = words[0].split()
    if len(words) == 3 and words[1] == "via":
        return words[0], words[2], False
    if len(words) == 2 and words[1] == "dev":
        return words[0], None, True
    raise _usage(f"--route {' '.join(words)!r}: expected 'PREFIX via GW' or 'PREFIX dev'")


def _parse_mac(text: str | None) -> bytes | None:
    if text is None:
        return None
    parts = text.split(":")
    if len(parts) != 6 or not all(len(p) == 2 for p in parts):
        raise _usage(f"--mac {text!r}: expected six hex bytes like 02:00:00:00:00:01")
    try:
        mac = bytes(int(p, 16) for p in parts)
    except ValueError:
        raise _usage(f"--mac {text!r}: not hex") from None
    if mac[0] & 1:
        raise _usage(f"--mac {text}: a multicast address cannot be a host's MAC")
    return mac


def has_net_admin() -> bool:
    """CAP_NET_ADMIN in the effective set (from /proc/self/status): root has it unless
    it was dropped (a container, ``capsh --drop``); without /proc, assume root has it."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("CapEff:"):
                    return bool(int(line.split()[1], 16) >> CAP_NET_ADMIN & 1)
    except OSError:
        pass
    return os.geteuid() == 0


def _validate(args: argparse.Namespace) -> list[tuple[str, str | None, bool]]:
    import ipaddress

    if not args.address:
        raise _usage("give at least one --address ADDR/PREFIX")
    for text in args.address:
        try:
            ipaddress.ip_interface(text)
        except ValueError:
            raise _usage(f"--address {text!r}: not an address/prefix") from None
    if not 1 <= args.queues <= 16:
        raise _usage("--queues must be 1..16")
    if not 68 <= args.mtu <= 65535:
        raise _usage("--mtu must be 68..65535")
    from rcunet.services import check_flags, parse_specs

    try:
        specs = parse_specs(args.serve)
    except ValueError as exc:
        raise _usage(f"--serve: {exc}") from None
    try:
        check_flags(specs, _service_flags(args))
    except ValueError as exc:
        raise _usage(str(exc)) from None
    return [parse_route(words) for words in args.route]


def _service_flags(args: argparse.Namespace) -> dict[str, str]:
    return {"neper": args.neper} if getattr(args, "neper", "").strip() else {}


def _fail(message: str) -> int:
    print(f"rcunet up: {message}", file=sys.stderr)
    return 1


def run(args: argparse.Namespace) -> int:
    routes = _validate(args)
    from rcunet.control.memory import MemoryTracer

    try:
        args.trace_frames = MemoryTracer.frames_from_env()
    except ValueError as exc:
        raise _usage(str(exc)) from None
    mac = _parse_mac(args.mac)
    mode, name = ("tap", args.tap) if args.tap else ("tun", args.tun)
    if not has_net_admin():
        return _fail(f"attaching to {mode} device {name!r} needs root or CAP_NET_ADMIN "
                     f"(try: sudo rcunet up ...)")
    from rcunet.link.tap import TapDevice, TapError

    try:
        device = TapDevice(name, mode=mode, queues=args.queues)
    except ValueError as exc:
        raise _usage(str(exc)) from None
    except TapError as exc:
        return _fail(exc.strerror or str(exc))
    try:
        return _run_on(device, args, routes, mac)
    finally:
        device.close()


def _bring_up(name: str) -> str | None:
    """``ip link set NAME up`` in our namespace; an error message or None."""
    try:
        from pyroute2 import IPRoute  # type: ignore[import-untyped]

        with IPRoute() as ipr:
            found = ipr.link_lookup(ifname=name)
            if found:
                ipr.link("set", index=found[0], state="up")
    except Exception as exc:  # pyroute2 missing or netlink refused: say it, keep going
        return f"could not set {name} up ({exc}); run: ip link set {name} up"
    return None


def _run_on(device: Any, args: argparse.Namespace,
            routes: list[tuple[str, str | None, bool]], mac: bytes | None) -> int:
    from rcunet.host.host import Host
    from rcunet.link.pcap import PcapWriter
    from rcunet.services import start_services
    from rcunet.sync import lockstat
    from rcunet.tuning import Tuning

    if args.lockstat:
        lockstat.enable()
    stop = threading.Event()
    device.on_lost = lambda reason: stop.set()
    pcap = PcapWriter(args.pcap, linktype=device.linktype) if args.pcap else None
    host = Host(f"rcunet-{device.name}", tuning=Tuning.preset(args.preset),
                rx_queues=args.queues)
    services = None
    control = None
    previous = _install_signals(stop)
    try:
        iface = device.attach(host, mac=mac, mtu=args.mtu, addresses=args.address, pcap=pcap)
        for prefix, via, on_link in routes:
            try:
                host.add_route(prefix, via=via, dev=iface.name if on_link else None)
            except (OSError, ValueError) as exc:
                raise _usage(f"--route {prefix}: {exc}") from None
        warning = _bring_up(device.name)
        if warning:
            print(f"rcunet up: {warning}", file=sys.stderr)
        host.start()
        device.start()
        try:
            services = start_services(host, args.serve, _service_flags(args))
        except OSError as exc:
            return _fail(f"cannot start services: {exc}")
        control_path = _control_path(args, device.name)
        if control_path is not None:
            from rcunet.control.memory import MemoryTracer
            from rcunet.control.server import ControlError, ControlServer

            tracer = None
            if getattr(args, "trace_frames", 0):
                tracer = MemoryTracer()
                tracer.start(args.trace_frames)
            try:
                control = ControlServer(host, control_path, tracer).start()
            except (ControlError, OSError) as exc:
                return _fail(f"control socket: {exc}")
            print(f"rcunet up: control socket {control_path} (rcunet ss/nstat/lockstat "
                  f"--control {control_path})", flush=True)
        _announce(device, iface, services.describe())
        while not stop.wait(0.5):
            pass
    finally:
        if control is not None:
            control.stop()
        if services is not None:
            services.stop()
        host.close()
        device.close()
        if pcap is not None:
            pcap.close()
        _restore_signals(previous)
        if args.lockstat:
            print(lockstat.format_lock_stat(lockstat.snapshot()), flush=True)
    if device.lost:
        return _fail(f"{device.lost}; shutting down")
    print("rcunet up: stopped", file=sys.stderr)
    return 0


def _control_path(args: argparse.Namespace, device_name: str) -> str | None:
    if args.control == "none":
        return None
    from rcunet.control.client import RUN_DIR, default_path

    path = str(args.control) if args.control else default_path(device_name)
    if os.path.dirname(os.path.abspath(path)) == RUN_DIR:  # /run is a tmpfs: made at boot
        os.makedirs(RUN_DIR, mode=0o700, exist_ok=True)
    return path


def _announce(device: Any, iface: Any, services: list[str]) -> None:
    mac = ":".join(f"{b:02x}" for b in iface.mac) if iface.mac else "none (IP only)"
    addresses = " ".join(str(a) for a in iface.addresses)
    print(f"rcunet up: {device.mode} {device.name} queues={device.queues} mac {mac}",
          flush=True)
    print(f"rcunet up: addresses {addresses}", flush=True)
    print(f"rcunet up: serving {', '.join(services) or 'nothing'}", flush=True)
    print("rcunet up: ready (SIGINT or SIGTERM to stop)", flush=True)


def _install_signals(stop: threading.Event) -> dict[int, Any]:
    previous: dict[int, Any] = {}
    if threading.current_thread() is not threading.main_thread():
        return previous  # only the main thread may set handlers (tests call run directly)
    for sig in (signal.SIGINT, signal.SIGTERM):
        previous[sig] = signal.signal(sig, lambda *_: stop.set())
    return previous


def _restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)
