"""MD5 key lookup as __tcp_md5_do_lookup does it: the longest prefix that covers the
peer, the newest of equal ones (keys are added at the head of the list), v4-mapped
peers of a dual-stack socket matched against IPv4 keys."""

from __future__ import annotations

import socket

from rcunet.core.tcp.md5 import Md5Key, lookup

V4 = socket.inet_aton


def key(addr: str, prefix: int, secret: bytes) -> Md5Key:
    family = socket.AF_INET6 if ":" in addr else socket.AF_INET
    return Md5Key(socket.inet_pton(family, addr), prefix, 0, secret)


def test_longest_prefix_wins() -> None:
    keys = (key("10.0.0.0", 8, b"wide"), key("10.1.0.0", 16, b"narrow"))
    assert lookup(keys, V4("10.1.2.3")).key == b"narrow"
    assert lookup(keys, V4("10.2.2.3")).key == b"wide"
    assert lookup(keys, V4("192.0.2.1")) is None
    assert lookup(None, V4("10.1.2.3")) is None


def test_newest_of_equal_prefixes_wins() -> None:
    keys = (key("10.0.0.2", 24, b"newer"), key("10.0.0.1", 24, b"older"))
    assert lookup(keys, V4("10.0.0.77")).key == b"newer"


def test_odd_prefix_bits_and_mapped_peers() -> None:
    keys = (key("10.0.0.128", 25, b"upper"), key("fd00::", 60, b"six"))
    assert lookup(keys, V4("10.0.0.200")).key == b"upper"
    assert lookup(keys, V4("10.0.0.100")) is None
    assert lookup(keys, bytes(10) + b"\xff\xff" + V4("10.0.0.129")).key == b"upper"
    assert lookup(keys, socket.inet_pton(socket.AF_INET6, "fd00:0:0:f::1")).key == b"six"
    assert lookup(keys, socket.inet_pton(socket.AF_INET6, "fd00:0:0:10::1")) is None
