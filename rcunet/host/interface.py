"""Network interfaces of a Host: addresses, link type, MTU, multicast memberships, and
the hand-off of received frames to the Host's receive path."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import NamedTuple

from rcunet.core.neigh import NeighbourTable
from rcunet.sync.lock import LockClass

IFACE_CONFIG_LOCK = LockClass("iface.config_lock")
NEIGH_LOCK = LockClass("neigh.lock")


class Address(NamedTuple):
    """An interface address: packed ``addr`` with its prefix length."""

    addr: bytes
    prefix_len: int

    @property
    def family(self) -> int:
        return 4 if len(self.addr) == 4 else 6

    def broadcast(self) -> bytes | None:
        if len(self.addr) != 4 or self.prefix_len >= 31:
            return None
        host_bits = (1 << (32 - self.prefix_len)) - 1
        return (int.from_bytes(self.addr, "big") | host_bits).to_bytes(4, "big")

    def __str__(self) -> str:
        return f"{ipaddress.ip_address(self.addr)}/{self.prefix_len}"


def parse_address(text: str) -> Address:
    """``"10.0.0.1/24"`` or ``"fe80::1/64"`` -> Address (a bare address is a host route)."""
    iface = ipaddress.ip_interface(text)
    return Address(iface.ip.packed, iface.network.prefixlen)


def link_local_from_mac(mac: bytes) -> bytes:
    """RFC 4291 Appendix A: fe80::/64 with the modified EUI-64 interface identifier."""
    eui = bytes([mac[0] ^ 0x02]) + mac[1:3] + b"\xff\xfe" + mac[3:6]
    return b"\xfe\x80" + b"\x00" * 6 + eui


_SOLICITED_NODE_PREFIX = bytes.fromhex("ff02" + "00" * 9 + "01ff")


def solicited_node(addr: bytes) -> bytes:
    """RFC 4291 §2.7.1: ff02::1:ffXX:XXXX for the low 24 bits of ``addr``."""
    return _SOLICITED_NODE_PREFIX + addr[13:16]


def multicast_mac(group: bytes) -> bytes:
    """The Ethernet address a multicast group maps to (RFC 1112 §6.4, RFC 2464 §7)."""
    if len(group) == 4:
        return bytes([0x01, 0x00, 0x5E, group[1] & 0x7F, group[2], group[3]])
    return b"\x33\x33" + group[12:16]


class Interface:
    """One interface.

    Concurrency:
      addresses, groups  copy-on-write tuples/frozensets; readers load the attribute once
                         (atomic: one reference load), writers replace it under
                         ``_config_lock`` (configuration is rare, lookups are per packet).
      neigh4, neigh6     not thread-safe (core); every call holds ``neigh_lock``.
      _send              immutable after attach.
    """

    def __init__(
        self,
        name: str,
        ifindex: int,
        *,
        mac: bytes | None,
        mtu: int = 1500,
        checksum_offload: bool = False,
    ) -> None:
        self.name = name  # immutable
        self.ifindex = ifindex  # immutable
        self.mac = mac  # immutable: None for a pure-IP (TUN-like or point-to-point) link
        #: The link carries Ethernet frames (it has a MAC): immutable, as ``mac`` is, so a
        #: field read once per packet sent and received, not a property computed each time.
        self.is_ethernet = mac is not None
        self.mtu = mtu  # one attribute store in Host.set_mtu; readers load it once per use
        self.checksum_offload = checksum_offload  # clean in-memory links may skip checksums
        #: The receive path runs in the sender's thread (Host.add_interface sets it once,
        #: before the interface is attached to a link).
        self.inline_rx = False
        self.addresses: tuple[Address, ...] = ()  # rcu: writers hold _config_lock
        # Derived sets for per-packet membership tests, republished with ``addresses``.
        self.addr_set: frozenset[bytes] = frozenset()  # rcu: writers hold _config_lock
        self.broadcasts: frozenset[bytes] = frozenset()  # rcu: writers hold _config_lock
        self.groups: frozenset[bytes] = frozenset()  # rcu: writers hold _config_lock
        self.group_users: dict[bytes, int] = {}  # guarded-by: _config_lock
        self._config_lock = IFACE_CONFIG_LOCK.new()
        self.neigh_lock = NEIGH_LOCK.new()
        self.neigh4 = NeighbourTable()  # guarded-by: neigh_lock
        self.neigh6 = NeighbourTable()  # guarded-by: neigh_lock
        self._send: Callable[[bytes], object] | None = None
        self.up = True
        self.rx_frames = 0  # owner: diagnostics only (racy by design, not a counter)

    def __repr__(self) -> str:
        addrs = ", ".join(str(a) for a in self.addresses)
        return f"<Interface {self.name} #{self.ifindex} mtu {self.mtu} [{addrs}]>"

    # -- configuration ----------
    def add_address(self, address: Address) -> None:
        with self._config_lock:
            if address not in self.addresses:
                self._publish_locked(self.addresses + (address,))

    def remove_address(self, address: Address) -> None:
        with self._config_lock:
            self._publish_locked(tuple(a for a in self.addresses if a != address))

    def _publish_locked(self, addresses: tuple[Address, ...]) -> None:
        # Sets first, tuple last: each is one attribute store a reader loads on its own.
        self.addr_set = frozenset(a.addr for a in addresses)
        self.broadcasts = frozenset(b for a in addresses if (b := a.broadcast()) is not None)
        self.addresses = addresses

    def join_group(self, group: bytes) -> bool:
        """Count one more user of ``group``; True when this is the first (send a report)."""
        with self._config_lock:
            users = self.group_users.get(group, 0)
            self.group_users[group] = users + 1
            if users == 0:
                self.groups = self.groups | {group}
            return users == 0

    def leave_group(self, group: bytes) -> bool:
        """One user fewer; True when the last user left (send a leave/done)."""
        with self._config_lock:
            users = self.group_users.get(group, 0)
            if users <= 1:
                self.group_users.pop(group, None)
                self.groups = self.groups - {group}
                return users == 1
            self.group_users[group] = users - 1
            return False

    def has_address(self, addr: bytes) -> bool:
        return addr in self.addr_set  # atomic: one attribute load + frozenset lookup

    def addresses_of(self, family: int) -> list[Address]:
        return [a for a in self.addresses if a.family == family]

    # -- link attachment ----------
    def attach(self, send: Callable[[bytes], object]) -> None:
        """Connect to a link: ``send(frame)`` puts a frame on the wire."""
        self._send = send

    def transmit(self, frame: bytes) -> bool:
        send = self._send
        if send is None or not self.up:
            return False
        send(frame)
        return True
