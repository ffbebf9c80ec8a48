"""Header prediction (``Connection._fast_path``) is an optimisation only: the same
connection driven with it and without it puts exactly the same segments on the wire, over
clean and impaired links (loss, duplication, reordering, corruption), with and without
timestamps and SACK."""

from __future__ import annotations

import random

import pytest
from tcp_harness import Impairments, Net, digest, transfer

from rcunet.core.tcp import Connection, Options

LINKS = {
    "clean": Impairments(),
    "everything": Impairments(loss=0.03, dup=0.03, reorder=0.15, corrupt=0.01),
}


def _wire_trace(seed: int, link: str, opts: Options, data: bytes) -> list[tuple[int, str, object]]:
    net = Net(seed=seed, imp=LINKS[link], client_opts=opts, server_opts=opts)
    got = transfer(net, data, read_chunk=16384)
    assert digest(got) == digest(data)
    return [(at, to, seg) for at, to, seg in net.log]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("link", sorted(LINKS))
@pytest.mark.parametrize("ts,sack", [(True, True), (False, False)])
def test_fast_path_changes_nothing_on_the_wire(seed: int, link: str, ts: bool, sack: bool,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    data = random.Random(seed).randbytes(400_000)
    opts = Options(timestamps=ts, sack=sack, rcvbuf=65536, rcvbuf_max=1 << 20)
    fast = _wire_trace(seed, link, opts, data)
    monkeypatch.setattr(Connection, "_fast_path", lambda self, seg, now: False)
    slow = _wire_trace(seed, link, opts, data)
    assert len(fast) == len(slow)
    assert fast == slow


def test_fast_path_takes_the_bulk_of_a_clean_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    taken = []
    original = Connection._fast_path

    def counting(self: Connection, seg: object, now: int) -> bool:
        hit = original(self, seg, now)  # type: ignore[arg-type]
        taken.append(hit)
        return hit

    monkeypatch.setattr(Connection, "_fast_path", counting)
    data = bytes(300_000)
    net = Net(seed=1)
    assert len(transfer(net, data)) == len(data)
    assert sum(taken) > 0.8 * len(taken)
