"""``--target tap``: the client's sockets are an rcunet Host's, on a real TAP device.

    rcunet bench tcp_rr --target tap --tap neptap0 --tap-address 10.78.0.2/24 \\
        -c -H 10.78.0.1                     # a neper server on the kernel's side

The Host is built as ``rcunet up`` builds it (``TapDevice.attach``, the Tuning preset
of ``--tuning``), started, used by the client run (``targets._run_client`` with the
Host's ``socket``) and closed when the run ends.  The kernel's side of the device is the
user's to configure, as with ``rcunet up``: a device made beforehand (``ip tuntap add
dev neptap0 mode tap; ip addr add 10.78.0.1/24 dev neptap0``) is attached to as it is;
``--tap-peer ADDR/PREFIX`` instead puts that address on the kernel's side of the device
and brings it up (root, as the device itself needs).  ``-H`` must be on the device's
subnet, or reachable through ``--tap-route 'PREFIX via GW'``.

Only the client side runs here: the server on a TAP device is ``rcunet up --serve
neper`` (a daemon serving one client after another, as a neper server serves one).
"""

from __future__ import annotations

import argparse
from typing import Any


class TapTargetError(Exception):
    """The device or the Host could not be set up (one line; the run reports it as
    neper reports its errors)."""


def configure(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("--target tap (rcunet's own)")
    group.add_argument("--tap", metavar="NAME", help="the TAP device the client Host "
                       "uses (made when absent; an existing one is attached to)")
    group.add_argument("--tap-address", metavar="ADDR/PREFIX", action="append", default=[],
                       help="an address of the client Host on the device (repeat for more)")
    group.add_argument("--tap-peer", metavar="ADDR/PREFIX", action="append", default=[],
                       help="put this address on the kernel's side of the device and "
                            "bring it up (otherwise it is yours to configure)")
    group.add_argument("--tap-route", metavar="ROUTE", action="append", default=[],
                       help="'PREFIX via GW' for a server off the device's subnet")


def problems(opts: argparse.Namespace) -> list[str]:
    """What ``validate`` adds for --target tap (and for --tap* given without it)."""
    found: list[str] = []
    tap_flags = opts.tap or opts.tap_address or opts.tap_peer or opts.tap_route
    if opts.target != "tap":
        if tap_flags:
            found.append("--tap, --tap-address, --tap-peer and --tap-route need "
                         "--target tap.")
        return found
    if not opts.client:
        found.append("--target tap runs the client on an rcunet Host: give -c -H ADDR "
                     "(the server on a TAP device is rcunet up --serve neper).")
    if not opts.tap or not opts.tap_address:
        found.append("--target tap needs --tap NAME and --tap-address ADDR/PREFIX.")
    if opts.host and not _numeric(opts.host):
        found.append("--target tap takes a numeric -H (an rcunet Host has no resolver "
                     "for other machines' names).")
    return found


def _numeric(text: str) -> bool:
    import ipaddress

    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


class TapTarget:
    """An rcunet Host on a TAP device, for the client side of a run."""

    name = "tap"

    def __init__(self, opts: argparse.Namespace) -> None:
        from rcunet.host.host import Host
        from rcunet.link.tap import TapDevice, TapError
        from rcunet.tuning import Tuning

        try:
            self.device = TapDevice(opts.tap)
        except (TapError, ValueError) as exc:
            raise TapTargetError(f"--tap {opts.tap}: {getattr(exc, 'strerror', None) or exc}") \
                from None
        self.host = Host(f"rcunet-bench-{opts.tap}", tuning=Tuning.preset(opts.tuning))
        try:
            iface = self.device.attach(self.host, addresses=list(opts.tap_address))
            for text in opts.tap_route:
                prefix, _, gateway = text.partition(" via ")
                self.host.add_route(prefix.strip(), via=gateway.strip() or None,
                                    dev=None if gateway else iface.name)
            _kernel_side(opts.tap, opts.tap_peer)
            self.host.start()
            self.device.start()
        except (OSError, ValueError) as exc:
            self.close()
            raise TapTargetError(f"--target tap: {exc}") from None

    def client_socket(self, family: int, kind: int) -> Any:
        return self.host.socket(family, kind)

    def close(self) -> None:
        try:
            self.host.close()
        finally:
            self.device.close()


def _kernel_side(name: str, addresses: list[str]) -> None:
    """``ip addr add ADDR dev NAME; ip link set NAME up`` through netlink."""
    if not addresses:
        return
    import ipaddress

    from pyroute2 import IPRoute  # type: ignore[import-untyped]

    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=name)[0]
        for text in addresses:
            interface = ipaddress.ip_interface(text)
            try:
                ipr.addr("add", index=index, address=str(interface.ip),
                         prefixlen=interface.network.prefixlen)
            except Exception as exc:  # pyroute2's NetlinkError: EEXIST is fine
                if getattr(exc, "code", None) != 17:
                    raise OSError(getattr(exc, "code", 0), f"ip addr add {text}: {exc}") \
                        from None
        ipr.link("set", index=index, state="up")
