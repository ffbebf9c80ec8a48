"""The send side's memory arithmetic (rcunet.core.tcp.sndbuf): Linux's constants, the
memory and writability rules, and where the send queue's skbs end."""

from __future__ import annotations

from rcunet.core.tcp.sndbuf import (
    NO_LOWAT,
    SOCK_MIN_SNDBUF,
    TX_SKB_TRUESIZE,
    SendSkbs,
    is_writeable,
    memory_free,
    sndbuf_expand,
)


def test_linux_constants() -> None:
    # SKB_TRUESIZE(384): the 704-byte small head less skb_shared_info, + 256 + 320
    assert TX_SKB_TRUESIZE == 960
    assert SOCK_MIN_SNDBUF == 4608


def test_memory_free_below_the_buffer_and_the_mark() -> None:
    assert memory_free(9999, 10000, 10**6, NO_LOWAT)
    assert not memory_free(10000, 10000, 0, NO_LOWAT)  # at the buffer: no new skb
    assert memory_free(0, 10000, 31999, 32000)
    assert not memory_free(0, 10000, 32000, 32000)
    assert not memory_free(0, 10000, 16000, 32000, wake=True)  # a wakeup: half the mark
    assert memory_free(0, 10000, 15999, 32000, wake=True)


def test_writeable_needs_a_third_of_the_buffer_free() -> None:
    assert is_writeable(6666, 10000, 0, NO_LOWAT)  # 3334 free >= 3333
    assert not is_writeable(6668, 10000, 0, NO_LOWAT)  # 3332 free < 3334
    assert not is_writeable(0, 10000, 16000, 32000, wake=True)


def test_sndbuf_expand_counts_worst_case_truesize() -> None:
    assert sndbuf_expand(16384, 4 << 20, 1460, 10) == 87040
    assert sndbuf_expand(16384, 50_000, 1460, 10) == 50_000  # tcp_wmem[2]
    assert sndbuf_expand(100_000, 4 << 20, 1460, 10) == 0  # never shrinks


def test_skbs_split_where_a_transmission_stops_and_free_when_acked() -> None:
    skbs = SendSkbs()
    skbs.push(1000)
    skbs.extend_tail(17000)
    skbs.push(33000)
    assert skbs.open_tail(first=1000, snd_max=1000) == 16000  # the second skb is unsent
    skbs.split(11000)  # the first flight stopped inside the first skb
    skbs.split(17000)  # at an skb's end: nothing to split
    assert list(skbs.ends) == [11000, 17000, 33000] and skbs.overhead() == 3 * 960
    assert skbs.open_tail(first=1000, snd_max=17001) is None  # the tail was sent
    skbs.acked(12000)  # the first freed, the second trimmed (its truesize stays)
    assert list(skbs.ends) == [17000, 33000]
    skbs.tail_closed = True  # a MSG_EOR record's end
    assert skbs.open_tail(first=12000, snd_max=12000) is None
    skbs.acked(33000)
    assert not skbs and not skbs.tail_closed


def test_sequence_numbers_wrap() -> None:
    skbs = SendSkbs()
    skbs.push(0xFFFFFF00)
    skbs.extend_tail(0x100)
    assert skbs.open_tail(first=0xFFFFFE00, snd_max=0xFFFFFE00) == 0x300
    skbs.split(0x10)
    assert list(skbs.ends) == [0x10, 0x100]
