"""Initial sequence numbers (RFC 6528) and timestamp offsets, from caller-supplied secrets.

RFC 6528 §3: ISN = M + F(localip, localport, remoteip, remoteport, secretkey), with M a
clock and F a keyed hash.  Linux (``secure_tcp_seq``) uses SipHash for F and
``ktime_get_real_ns() >> 6`` for M (one tick per 64 ns); we keep Linux's M and use keyed
BLAKE2b for F (``hashlib`` is pure computation: no clock, no randomness).  The secret is
the host's, drawn once at start-up from a real RNG; it never leaves the host.
"""

from __future__ import annotations

import hashlib

MASK32 = 0xFFFFFFFF
#: Linux seq_scale(): M advances once per 64 ns.
CLOCK_SHIFT = 6


def _keyed32(secret: bytes, label: bytes, *parts: bytes) -> int:
    # each part after its one-byte length, hashed in one call
    message = b"".join([len(part).to_bytes(1, "big") + part for part in parts])
    digest = hashlib.blake2b(message, digest_size=4, key=secret[:64], person=label).digest()
    return int.from_bytes(digest, "big")


def initial_sequence(secret: bytes, local_addr: bytes, local_port: int, remote_addr: bytes,
                     remote_port: int, now: int) -> int:
    """RFC 6528 ISN for one 4-tuple at time ``now`` (int ns from a real clock)."""
    f = _keyed32(secret, b"rcunet-isn", local_addr, remote_addr,
                 local_port.to_bytes(2, "big"), remote_port.to_bytes(2, "big"))
    return (f + (now >> CLOCK_SHIFT)) & MASK32


def timestamp_offset(secret: bytes, local_addr: bytes, remote_addr: bytes) -> int:
    """Per address pair TSval offset (Linux secure_tcp_ts_off; RFC 7323 §5.4 / §7.1)."""
    return _keyed32(secret, b"rcunet-tsoff", local_addr, remote_addr)
