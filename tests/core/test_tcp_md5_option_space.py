"""A keyed connection (RFC 2385) gives the MD5 option 20 of the 40 bytes of option
space: the engine leaves room for it as Linux's tcp_syn_options, tcp_synack_options and
tcp_established_options do, so a signed segment never needs more than 40 bytes."""

from __future__ import annotations

import pytest

from rcunet.core.tcp import Connection, Options
from rcunet.wire import tcp_md5

COOKIE = (34, bytes(8))  # a Fast Open cookie (RFC 7413)


@pytest.mark.parametrize(("option", "kept"), [(COOKIE, False), ((34, b""), True)])
def test_keyed_syn_keeps_a_fast_open_option_only_if_it_fits(option: tuple[int, bytes],
                                                           kept: bool) -> None:
    """MD5 20 + MSS 4 + SACK-permitted 4 + window scale 4 leave 8 bytes: room for a
    cookie request (4), not for an 8-byte cookie (12)."""
    conn = Connection.connect(local_port=1, remote_port=2, iss=0, now=0,
                              options=Options(md5=True), fastopen_option=option)
    (syn,) = conn.take_segments()
    assert syn.timestamp is None  # a keyed SYN offers no timestamps
    assert (option in syn.unknown_options) is kept
    signed = tcp_md5.sign(syn, bytes(4), bytes(4), b"k")
    assert len(signed.options_bytes()) <= 40


def test_unkeyed_syn_is_unchanged() -> None:
    conn = Connection.connect(local_port=1, remote_port=2, iss=0, now=0,
                              options=Options(), fastopen_option=COOKIE)
    (syn,) = conn.take_segments()
    assert syn.timestamp is not None and COOKIE in syn.unknown_options
