"""SYN cookies, encoded as Linux's net/ipv4/syncookies.c does (RFC 4987 §3.6).

A listener whose SYN queue is full answers a SYN statelessly: its ISN is the cookie

    cookie = H0(4-tuple) + client_isn + (count << 24) + ((H1(4-tuple, count) + mssind) & 0xFFFFFF)

where ``count`` is the minute counter (``tcp_cookie_time``) and ``mssind`` indexes
``MSS_TABLE``.  When the final ACK arrives, ``check`` peels the layers off ACK-1 and
recovers ``mssind`` if the cookie is at most ``MAX_AGE`` minutes old.  With timestamps the
SYN,ACK's TSval also carries the options the SYN offered in its low 6 bits
(``cookie_init_timestamp``): window scale (0xf = none), SACK, ECN.

The hash differs from Linux's (keyed BLAKE2b instead of SipHash); the layout is the same.
The secret comes from the caller.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple

from rcunet.core.tcp.common import MS
from rcunet.core.tcp.connection import Connection
from rcunet.core.tcp.counters import Counters
from rcunet.core.tcp.listen import choose_wscale
from rcunet.core.tcp.options import SECOND, Options
from rcunet.core.tcp.window import TS_OPTION_BYTES, initial_window
from rcunet.wire import tcp

MASK32 = 0xFFFFFFFF
COOKIEBITS = 24  #: upper 8 bits store the minute count
COOKIEMASK = (1 << COOKIEBITS) - 1
MAX_AGE = 2  #: MAX_SYNCOOKIE_AGE, minutes
MSS_TABLE = (536, 1300, 1440, 1460)  #: Linux msstab (net/ipv4/syncookies.c)
#: Linux net/ipv6/syncookies.c msstab: 1280 - 60, 1480 - 60, 1500 - 60, 9000 - 60.
MSS_TABLE_V6 = (1220, 1420, 1440, 8940)


def mss_table(addr: bytes) -> tuple[int, ...]:
    """The table for the address family of ``addr`` (16 bytes: IPv6)."""
    return MSS_TABLE_V6 if len(addr) == 16 else MSS_TABLE
TSBITS = 6
TS_OPT_WSCALE_MASK = 0xF
TS_OPT_SACK = 1 << 4
TS_OPT_ECN = 1 << 5


def cookie_time(now: int) -> int:
    """Linux tcp_cookie_time(): minutes, modulo 2**32."""
    return (now // (60 * SECOND)) & MASK32


def _hash(secret: bytes, c: int, saddr: bytes, daddr: bytes, sport: int, dport: int,
          count: int) -> int:
    h = hashlib.blake2b(digest_size=4, key=secret[:64], person=b"rcunet-cookie%d" % c)
    h.update(saddr + daddr + sport.to_bytes(2, "big") + dport.to_bytes(2, "big")
             + count.to_bytes(4, "big"))
    return int.from_bytes(h.digest(), "big")


def mss_index(mss: int, table: tuple[int, ...] = MSS_TABLE) -> int:
    """Largest table entry not above ``mss`` (entry 0 if none is)."""
    for index in range(len(table) - 1, 0, -1):
        if mss >= table[index]:
            return index
    return 0


def encode(secret: bytes, saddr: bytes, daddr: bytes, sport: int, dport: int, client_isn: int,
           mss: int, now: int) -> tuple[int, int]:
    """secure_tcp_syn_cookie: (cookie ISN, the MSS it encodes).  saddr/sport are the client's."""
    table = mss_table(saddr)
    index = mss_index(mss, table)
    count = cookie_time(now)
    cookie = (_hash(secret, 0, saddr, daddr, sport, dport, 0) + client_isn
              + (count << COOKIEBITS)
              + ((_hash(secret, 1, saddr, daddr, sport, dport, count) + index) & COOKIEMASK))
    return cookie & MASK32, table[index]


def check(secret: bytes, saddr: bytes, daddr: bytes, sport: int, dport: int, ack: tcp.Repr,
          now: int) -> int:
    """__cookie_v4_check: the MSS the cookie in ``ack`` encodes, or 0 if it is not valid."""
    cookie = (ack.ack - 1) & MASK32
    seq = (ack.seq - 1) & MASK32
    count = cookie_time(now)
    cookie = (cookie - (_hash(secret, 0, saddr, daddr, sport, dport, 0) + seq)) & MASK32
    diff = (count - (cookie >> COOKIEBITS)) & (MASK32 >> COOKIEBITS)
    if diff >= MAX_AGE:
        return 0
    index = (cookie - _hash(secret, 1, saddr, daddr, sport, dport, (count - diff) & MASK32)) \
        & COOKIEMASK
    table = mss_table(saddr)
    return table[index] if index < len(table) else 0


def encode_ts_options(ts_now: int, wscale: int | None, sack: bool, ecn: bool = False) -> int:
    """cookie_init_timestamp: TSval whose low 6 bits carry the SYN's options, <= ts_now."""
    options = TS_OPT_WSCALE_MASK if wscale is None else wscale & TS_OPT_WSCALE_MASK
    if sack:
        options |= TS_OPT_SACK
    if ecn:
        options |= TS_OPT_ECN
    ts = ((ts_now >> TSBITS) << TSBITS) | options
    if ts > ts_now:
        ts -= 1 << TSBITS
    return ts & MASK32


class CookieOptions(NamedTuple):
    wscale: int | None
    sack: bool
    ecn: bool


def decode_ts_options(tsecr: int) -> CookieOptions:
    """cookie_timestamp_decode: the options hidden in the echoed TSval."""
    ws = tsecr & TS_OPT_WSCALE_MASK
    return CookieOptions(None if ws == TS_OPT_WSCALE_MASK else ws, bool(tsecr & TS_OPT_SACK),
                         bool(tsecr & TS_OPT_ECN))


def syn_ack_for(syn: tcp.Repr, *, secret: bytes, saddr: bytes, daddr: bytes, now: int,
                options: Options | None = None, ts_offset: int = 0,
                counters: Counters | None = None) -> tcp.Repr:
    """The stateless SYN,ACK a listener sends instead of queueing ``syn``.

    ``saddr`` is the client's address (the SYN's IP source), ``daddr`` ours.
    """
    o = options or Options()
    peer_mss = syn.mss if syn.mss is not None else o.default_peer_mss
    isn, _ = encode(secret, saddr, daddr, syn.src_port, syn.dst_port, syn.seq,
                             min(peer_mss, o.mss), now)
    ws_ok = o.window_scaling and syn.window_scale is not None
    sack_ok = o.sack and syn.sack_permitted
    timestamp = None
    if o.timestamps and syn.timestamp is not None:
        ts_now = (now // MS + ts_offset) & MASK32
        peer_ws = min(syn.window_scale, 14) if ws_ok and syn.window_scale is not None else None
        timestamp = (encode_ts_options(ts_now, peer_ws, sack_ok), syn.timestamp[0])
    if counters is not None:
        counters.add("TcpExtSyncookiesSent")
    return tcp.Repr(src_port=syn.dst_port, dst_port=syn.src_port, seq=isn,
                    ack=(syn.seq + 1) & MASK32, flags=tcp.SYN | tcp.ACK,
                    window=min(initial_window(o.rcvbuf, o.window_clamp, o.mss - (
                        TS_OPTION_BYTES if timestamp is not None else 0)), 0xFFFF),
                    # tcp_make_synack advertises our own MSS (the route's advmss); the
                    # cookie's table entry only limits what we send (cookie_v4_check).
                    mss=o.mss,
                    # Linux clears every option but MSS when the cookie cannot carry them.
                    window_scale=choose_wscale(o.window_space) if ws_ok and timestamp else None,
                    sack_permitted=sack_ok and timestamp is not None, timestamp=timestamp)


def connection_from_ack(ack: tcp.Repr, *, secret: bytes, saddr: bytes, daddr: bytes, now: int,
                        options: Options | None = None, ts_offset: int = 0,
                        counters: Counters | None = None) -> Connection | None:
    """Validate a cookie ACK reaching a listener; rebuild the connection, or None.

    Without timestamps, window scaling and SACK are lost (Linux: the cookie cannot carry
    them), so the connection runs without them.
    """
    o = options or Options()
    if not ack.flags & tcp.ACK or ack.flags & (tcp.SYN | tcp.RST):
        return None
    mss = check(secret, saddr, daddr, ack.src_port, ack.dst_port, ack, now)
    if not mss:
        if counters is not None:
            counters.add("TcpExtSyncookiesFailed")
        return None
    if counters is not None:
        counters.add("TcpExtSyncookiesRecv")
    wscale, sack, ts_ok = None, False, False
    if ack.timestamp is not None and o.timestamps:
        decoded = decode_ts_options(ack.timestamp[1])
        wscale, sack, ts_ok = decoded.wscale, decoded.sack, True
    return Connection.from_cookie(ack, mss=mss, wscale=wscale, sack_ok=sack, ts_ok=ts_ok,
                                  now=now, options=o, ts_offset=ts_offset, counters=counters,
                                  local_addr=daddr, remote_addr=saddr)
