"""``segment_repr`` builds ``tcp.Repr`` positionally for speed (core/tcp/common.py): it
must stay the value the keyword constructor gives, whatever wire/tcp.py's field order."""

from __future__ import annotations

from rcunet.core.tcp.common import segment_repr
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
