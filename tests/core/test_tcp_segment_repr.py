"""``segment_repr`` and ``syn_repr`` build ``tcp.Repr`` positionally for speed
(core/tcp/common.py): each must stay the value the keyword constructor gives, whatever
wire/tcp.py's field order."""

from __future__ import annotations

from rcunet.core.tcp.common import segment_repr, syn_repr
from rcunet.wire import tcp


def test_field_order_is_the_one_segment_repr_assumes() -> None:
    assert tcp.Repr._fields == (
        "src_port", "dst_port", "seq", "ack", "flags", "window", "payload", "urgent", "mss",
        "window_scale", "sack_permitted", "sack_blocks", "timestamp", "unknown_options",
        "checksum", "checksum_ok", "ecn")


def test_segment_repr_equals_the_keyword_construction() -> None:
    args = dict(src_port=1234, dst_port=80, seq=7, ack=99, flags=tcp.ACK | tcp.PSH,
                window=512, payload=b"data", sack_blocks=((1, 2), (5, 9)), timestamp=(3, 4))
    built = segment_repr(**args)  # type: ignore[arg-type]
    assert type(built) is tcp.Repr
    assert built == tcp.Repr(**args)  # type: ignore[arg-type]
    assert built._asdict() == tcp.Repr(**args)._asdict()  # type: ignore[arg-type]
    assert segment_repr(1, 2, 3, 4, tcp.RST, 0, b"", (), None) == tcp.Repr(
        src_port=1, dst_port=2, seq=3, ack=4, flags=tcp.RST, window=0)


def test_syn_repr_equals_the_keyword_construction() -> None:
    args = dict(src_port=40000, dst_port=80, seq=1, ack=0, flags=tcp.SYN, window=65535,
                payload=b"", mss=1460, window_scale=7, sack_permitted=True,
                timestamp=(5, 0), unknown_options=((254, b"\x12\x34"),))
    built = syn_repr(**args)  # type: ignore[arg-type]
    assert type(built) is tcp.Repr
    assert built._asdict() == tcp.Repr(**args)._asdict()  # type: ignore[arg-type]
    synack = syn_repr(80, 40000, 9, 2, tcp.SYN | tcp.ACK, 1024, b"hi", 536, None, False,
                      None, ())
    assert synack._asdict() == tcp.Repr(
        src_port=80, dst_port=40000, seq=9, ack=2, flags=tcp.SYN | tcp.ACK, window=1024,
        payload=b"hi", mss=536)._asdict()
