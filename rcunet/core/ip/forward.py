"""Forwarding decisions for a router (Linux ``ip_forward`` / ``ip6_forward``), sans-IO.

Given a packet that arrived for someone else, a route already chosen for it and the
path MTU of the way out, ``forward_ipv4``/``forward_ipv6`` return either the packets to
send on (TTL / hop limit decremented; IPv4 fragmented as needed) or the error the
caller answers with ICMP and counts:

* ``HopLimitExceeded``: TTL / hop limit would reach zero -> ICMP time exceeded, code 0
  (InHdrErrors in Linux).
* ``fragment.FragmentationNeeded``: IPv4 with DF set and larger than the MTU ->
  destination unreachable / fragmentation needed with the MTU (FragFails).
* ``PacketTooBig``: IPv6 larger than the MTU (routers never fragment IPv6) ->
  ICMPv6 packet too big with the MTU (InTooBigErrors, FragFails).
* ``BeyondScope``: IPv6 with a link-local source or destination must not leave its link
  (RFC 4291 §2.5.6) -> ICMPv6 destination unreachable, code 2 (beyond scope of source
  address), as Linux does for a link-local source; a link-local destination is dropped
  quietly (``answer`` False).

Whether forwarding is on (``ip_forward``), which route to use, and neighbour resolution
of the next hop are the caller's business.  Successful forwards count OutForwDatagrams.
"""

from __future__ import annotations

import dataclasses

from rcunet.core.ip.fragment import FragmentationNeeded, fragment_ipv4
from rcunet.wire import ipv4, ipv6
from rcunet.wire.addr import is_link_local6


@dataclasses.dataclass(frozen=True, slots=True)
class HopLimitExceeded:
    """TTL / hop limit exhausted in transit: answer with time exceeded, code 0."""

    packet: ipv4.Repr | ipv6.Repr


@dataclasses.dataclass(frozen=True, slots=True)
class PacketTooBig:
    """An IPv6 packet larger than the next link's MTU: answer with packet-too-big."""

    packet: ipv6.Repr
    mtu: int


@dataclasses.dataclass(frozen=True, slots=True)
class BeyondScope:
    """An IPv6 packet that must not leave its link; ``answer`` says whether to send
    destination unreachable, code 2."""

    packet: ipv6.Repr
    answer: bool


def forward_ipv4(
    packet: ipv4.Repr, mtu: int
) -> list[ipv4.Repr] | HopLimitExceeded | FragmentationNeeded:
    """The packets to send on for a forwarded IPv4 ``packet`` (TTL decremented,
    fragmented to ``mtu`` unless DF forbids it)."""
    if packet.ttl <= 1:
        return HopLimitExceeded(packet)
    if packet.dont_fragment and packet.buffer_len() > mtu:
        return FragmentationNeeded(packet, mtu)
    onward = packet._replace(ttl=packet.ttl - 1, checksum=0, checksum_ok=None)
    return fragment_ipv4(onward, mtu)


def forward_ipv6(
    packet: ipv6.Repr, mtu: int
) -> ipv6.Repr | HopLimitExceeded | PacketTooBig | BeyondScope:
    """The packet to send on for a forwarded IPv6 ``packet`` (hop limit decremented)."""
    if is_link_local6(packet.dst):
        return BeyondScope(packet, answer=False)
    if is_link_local6(packet.src):
        return BeyondScope(packet, answer=True)
    if packet.hop_limit <= 1:
        return HopLimitExceeded(packet)
    if packet.buffer_len() > mtu:
        return PacketTooBig(packet, mtu)
    return packet._replace(hop_limit=packet.hop_limit - 1)
