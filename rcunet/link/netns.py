"""Linux network namespaces and their devices, for running the kernel as rcunet's peer.

``Namespace`` is a context manager: it creates a named namespace (``ip netns add``),
configures links, addresses and routes in it through netlink (pyroute2), runs commands
inside it (``ip netns exec``), and on exit — also when the body raised — kills the
processes it started, deletes the links it moved in or created, and removes the
namespace.  Every method's docstring gives the ``ip`` command it is equivalent to.

    with Namespace("rcunet-demo") as ns:
        dev = TapDevice("rcutap0")                 # created in our namespace ...
        ns.adopt("rcutap0")                        # ... then moved into ns
        ns.add_address("rcutap0", "10.77.0.1/24")
        ns.set_link("rcutap0", up=True)
        ns.run(["ping", "-c1", "10.77.0.2"])

Root (or CAP_NET_ADMIN plus CAP_SYS_ADMIN) is required; ``NamespaceError`` says so.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from typing import Any

NETNS_RUN_DIR = "/var/run/netns"
IFA_F_NODAD = 0x02  # linux/if_addr.h: skip duplicate address detection


class NamespaceError(OSError):
    """Setting up or tearing down a namespace failed; the message says what to do."""


def _pyroute2() -> Any:
    try:
        import pyroute2  # type: ignore[import-untyped]  # pyroute2 ships no type hints
    except ImportError:
        raise NamespaceError(errno.ENOPKG, "pyroute2 is not installed "
                             "(pip install pyroute2; it is an rcunet dependency)") from None
    return pyroute2


def have_privileges() -> bool:
    """True when this process may create namespaces and devices (root, as a rule)."""
    return os.geteuid() == 0


def _permission_hint(exc: BaseException, what: str) -> NamespaceError:
    code = getattr(exc, "errno", None) or getattr(exc, "code", None) or errno.EPERM
    if code in (errno.EPERM, errno.EACCES):
        return NamespaceError(code, f"{what}: operation not permitted "
                              "(needs root, or CAP_NET_ADMIN and CAP_SYS_ADMIN)")
    return NamespaceError(code, f"{what}: {exc}")


class Namespace:
    """A network namespace that lives as long as the ``with`` block.

    Not thread-safe: one thread configures it (tests, ``rcunet up``); the processes it
    spawns run on their own.
    """

    def __init__(self, name: str) -> None:
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ValueError(f"bad namespace name {name!r}")
        self.name = name
        self._processes: list[subprocess.Popen[bytes]] = []
        self._links: list[str] = []  # links to delete on close (moved in or created)
        self._created = False

    def __repr__(self) -> str:
        return f"<Namespace {self.name}>"

    # -- lifecycle ----------
    def __enter__(self) -> Namespace:
        return self.create()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self) -> Namespace:
        """``ip netns add NAME && ip -n NAME link set lo up``."""
        netns = _pyroute2().netns
        if self.name in netns.listnetns():
            raise NamespaceError(errno.EEXIST, f"network namespace {self.name!r} exists")
        try:
            netns.create(self.name)
        except Exception as exc:
            raise _permission_hint(exc, f"creating network namespace {self.name!r}") from None
        self._created = True
        try:
            self.set_link("lo", up=True)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """Kill spawned processes, delete our links, ``ip netns del NAME``.  Never raises
        for something already gone; every step runs even if an earlier one failed."""
        for process in self._processes:
            _stop_process(process)
        self._processes.clear()
        if not self._created:
            return
        for ifname in reversed(self._links):
            with contextlib.suppress(Exception):
                self.delete_link(ifname)
        self._links.clear()
        with contextlib.suppress(Exception):
            _pyroute2().netns.remove(self.name)
        self._created = False

    @contextlib.contextmanager
    def _iproute(self) -> Iterator[Any]:
        with _pyroute2().NetNS(self.name) as ipr:
            yield ipr

    def _index(self, ipr: Any, ifname: str) -> int:
        found = ipr.link_lookup(ifname=ifname)
        if not found:
            raise NamespaceError(errno.ENODEV, f"no device {ifname!r} in {self.name}")
        return int(found[0])

    # -- links ----------
    def adopt(self, ifname: str) -> None:
        """Move ``ifname`` from this process's namespace in:
        ``ip link set IFNAME netns NAME``.  It is deleted when the namespace closes."""
        pyroute2 = _pyroute2()
        with pyroute2.IPRoute() as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if not found:
                raise NamespaceError(errno.ENODEV, f"no device {ifname!r} to move")
            try:
                ipr.link("set", index=found[0], net_ns_fd=self.name)
            except Exception as exc:
                raise _permission_hint(exc, f"moving {ifname} into {self.name}") from None
        self._links.append(ifname)

    def add_veth(self, ifname: str, peer: str) -> None:
        """A veth pair with both ends here:
        ``ip -n NAME link add IFNAME type veth peer name PEER``."""
        with self._iproute() as ipr:
            ipr.link("add", ifname=ifname, kind="veth", peer=peer)
        self._links.append(ifname)

    def add_tuntap(self, ifname: str, mode: str = "tap", multi_queue: bool = False) -> None:
        """A persistent device no process holds yet:
        ``ip -n NAME tuntap add dev IFNAME mode MODE [multi_queue]``."""
        argv = ["ip", "-n", self.name, "tuntap", "add", "dev", ifname, "mode", mode]
        self._ip(argv + (["multi_queue"] if multi_queue else []))
        self._links.append(ifname)

    def delete_link(self, ifname: str) -> None:
        """``ip -n NAME link del IFNAME`` (no error if it is already gone)."""
        with self._iproute() as ipr:
            found = ipr.link_lookup(ifname=ifname)
            if found:
                ipr.link("del", index=found[0])

    def set_link(self, ifname: str, *, up: bool | None = None, mtu: int | None = None,
                 address: str | None = None, txqlen: int | None = None) -> None:
        """``ip -n NAME link set IFNAME [up|down] [mtu MTU] [address MAC]
        [txqueuelen N]``."""
        fields: dict[str, Any] = {}
        if up is not None:
            fields["state"] = "up" if up else "down"
        if mtu is not None:
            fields["mtu"] = mtu
        if txqlen is not None:
            fields["txqlen"] = txqlen
        if address is not None:
            fields["address"] = address
        with self._iproute() as ipr:
            ipr.link("set", index=self._index(ipr, ifname), **fields)

    def link_exists(self, ifname: str) -> bool:
        with self._iproute() as ipr:
            return bool(ipr.link_lookup(ifname=ifname))

    def wait_link(self, ifname: str, timeout: float = 10.0) -> None:
        """Wait until ``ifname`` exists here (a process creating it in the background)."""
        end = time.monotonic() + timeout
        while not self.link_exists(ifname):
            if time.monotonic() > end:
                raise NamespaceError(errno.ENODEV, f"{ifname} did not appear in {self.name} "
                                     f"within {timeout} s")
            time.sleep(0.05)

    def link_mac(self, ifname: str) -> bytes:
        """The device's hardware address (``ip -n NAME link show IFNAME``)."""
        with self._iproute() as ipr:
            link = ipr.link("get", index=self._index(ipr, ifname))[0]
            return bytes.fromhex(link.get_attr("IFLA_ADDRESS").replace(":", ""))

    # -- addresses and routes ----------
    def add_address(self, ifname: str, cidr: str) -> None:
        """``ip -n NAME addr add CIDR dev IFNAME [nodad]`` (IPv6 skips DAD so the
        address is usable at once)."""
        interface = ipaddress.ip_interface(cidr)
        extra: dict[str, Any] = {}
        if interface.version == 6:
            extra["flags"] = IFA_F_NODAD
        with self._iproute() as ipr:
            ipr.addr("add", index=self._index(ipr, ifname), address=str(interface.ip),
                     prefixlen=interface.network.prefixlen, **extra)

    def add_route(self, prefix: str, *, via: str | None = None, dev: str | None = None
                  ) -> None:
        """``ip -n NAME route add PREFIX [via GW] [dev DEV]``."""
        network = ipaddress.ip_network(prefix, strict=False)
        fields: dict[str, Any] = {"dst": str(network.network_address),
                                  "dst_len": network.prefixlen}
        if network.version == 6:
            fields["family"] = 10
        if via is not None:
            fields["gateway"] = via
        with self._iproute() as ipr:
            if dev is not None:
                fields["oif"] = self._index(ipr, dev)
            ipr.route("add", **fields)

    def sysctl(self, key: str, value: str) -> None:
        """``ip netns exec NAME sysctl -w KEY=VALUE``."""
        self.run(["sysctl", "-q", "-w", f"{key}={value}"])

    # -- processes ----------
    def command(self, argv: Sequence[str]) -> list[str]:
        """The argv that runs ``argv`` inside: ``ip netns exec NAME ARGV...``."""
        return ["ip", "netns", "exec", self.name, *argv]

    def run(self, argv: Sequence[str], *, timeout: float = 30.0, check: bool = True,
            input: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        """Run to completion inside; output captured; ``check`` raises on failure with
        the command's stderr in the message."""
        result = subprocess.run(self.command(argv), capture_output=True, timeout=timeout,
                                input=input, check=False)
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, list(argv),
                                                result.stdout, result.stderr)
        return result

    def spawn(self, argv: Sequence[str], **popen_kw: Any) -> subprocess.Popen[bytes]:
        """Start ``argv`` inside in its own process group; killed at ``close``."""
        popen_kw.setdefault("stdin", subprocess.DEVNULL)
        process: subprocess.Popen[bytes] = subprocess.Popen(
            self.command(argv), start_new_session=True, **popen_kw)
        self._processes.append(process)
        return process

    def _ip(self, argv: list[str]) -> None:
        result = subprocess.run(argv, capture_output=True, check=False, timeout=30)
        if result.returncode != 0:
            message = result.stderr.decode(errors="replace").strip()
            raise NamespaceError(errno.EINVAL, f"{' '.join(argv)}: {message}")


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM the process group, SIGKILL it after 3 s."""
    if process.poll() is not None:
        return
    for sig, wait in ((signal.SIGTERM, 3.0), (signal.SIGKILL, 3.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        try:
            process.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def sweep_stale(prefix: str) -> list[str]:
    """Remove namespaces named ``PREFIX<pid>...`` whose creating process is gone (left by
    a test run that was killed).  Returns the names removed."""
    netns = _pyroute2().netns
    removed = []
    for name in netns.listnetns():
        match = re.fullmatch(re.escape(prefix) + r"(\d+)(?:-.*)?", name)
        if match is None or _alive(int(match.group(1))):
            continue
        with contextlib.suppress(Exception):
            netns.remove(name)
            removed.append(name)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
