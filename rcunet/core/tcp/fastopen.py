"""TCP Fast Open (RFC 7413) as Linux implements it (net/ipv4/tcp_fastopen.c): the
server's cookie, the Fast Open option in a SYN, and the decision a listener takes on a
SYN that carries one or data (``tcp_try_fastopen``).

Pure: the key, the addresses and the listener's Fast Open queue come in as arguments.

The cookie is Linux's: SipHash-2-4 keyed with the 16-byte Fast Open key (read as two
little-endian 64-bit words) over the SYN's source then destination address, stored
little-endian (``__tcp_fastopen_cookie_gen_cipher``), so a peer that computed the cookie
with Linux's key gets the same 8 bytes from us.  The key is written as
``net.ipv4.tcp_fastopen_key`` writes it (four 32-bit hex words, each stored
little-endian: ``proc_tcp_fastopen_key``), or as TCP_FASTOPEN_KEY's raw 16 bytes.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

#: net.ipv4.tcp_fastopen bits (include/net/tcp.h).
TFO_CLIENT_ENABLE = 0x1
TFO_SERVER_ENABLE = 0x2
TFO_CLIENT_NO_COOKIE = 0x4
TFO_SERVER_COOKIE_NOT_REQD = 0x200
#: Listeners get Fast Open (queue = the listen backlog) without TCP_FASTOPEN.
TFO_SERVER_WO_SOCKOPT1 = 0x400

#: The RFC 7413 option and the experimental one (RFC 6994 ExID 0xF989).
OPT_FASTOPEN = 34
OPT_EXP = 254
FASTOPEN_MAGIC = 0xF989
COOKIE_SIZE = 8  #: TCP_FASTOPEN_COOKIE_SIZE: the cookie Linux generates
COOKIE_MIN, COOKIE_MAX = 4, 16  #: lengths a peer's cookie may have (RFC 7413 §4.1.1)
KEY_LENGTH = 16  #: TCP_FASTOPEN_KEY_LENGTH

_M64 = (1 << 64) - 1
_LE64 = struct.Struct("<Q")
_LE32X4 = struct.Struct("<IIII")


def _rotl(x: int, b: int) -> int:
    return ((x << b) | (x >> (64 - b))) & _M64


def siphash24(key: bytes, msg: bytes) -> int:
    """SipHash-2-4 (Aumasson and Bernstein) of ``msg`` under a 16-byte ``key``."""
    k0: int
    k1: int
    k0, k1 = struct.unpack("<QQ", key)
    v0, v1 = k0 ^ 0x736F6D6570736575, k1 ^ 0x646F72616E646F6D
    v2, v3 = k0 ^ 0x6C7967656E657261, k1 ^ 0x7465646279746573
    n = len(msg)
    end = n - n % 8
    words = [_LE64.unpack_from(msg, i)[0] for i in range(0, end, 8)]
    words.append(((n & 0xFF) << 56) | int.from_bytes(msg[end:], "little"))
    for m in words:
        v3 ^= m
        for _ in range(2):
            v0 = (v0 + v1) & _M64; v1 = _rotl(v1, 13) ^ v0; v0 = _rotl(v0, 32)  # noqa: E702
            v2 = (v2 + v3) & _M64; v3 = _rotl(v3, 16) ^ v2  # noqa: E702
            v0 = (v0 + v3) & _M64; v3 = _rotl(v3, 21) ^ v0  # noqa: E702
            v2 = (v2 + v1) & _M64; v1 = _rotl(v1, 17) ^ v2; v2 = _rotl(v2, 32)  # noqa: E702
        v0 ^= m
    v2 ^= 0xFF
    for _ in range(4):
        v0 = (v0 + v1) & _M64; v1 = _rotl(v1, 13) ^ v0; v0 = _rotl(v0, 32)  # noqa: E702
        v2 = (v2 + v3) & _M64; v3 = _rotl(v3, 16) ^ v2  # noqa: E702
        v0 = (v0 + v3) & _M64; v3 = _rotl(v3, 21) ^ v0  # noqa: E702
        v2 = (v2 + v1) & _M64; v1 = _rotl(v1, 17) ^ v2; v2 = _rotl(v2, 32)  # noqa: E702
    return v0 ^ v1 ^ v2 ^ v3


def cookie(key: bytes, saddr: bytes, daddr: bytes) -> bytes:
    """The 8-byte cookie for a SYN from ``saddr`` to ``daddr`` (both 4 or both 16
    bytes) under ``key`` (__tcp_fastopen_cookie_gen_cipher)."""
    return _LE64.pack(siphash24(key, saddr + daddr))


def parse_key_text(text: str) -> tuple[bytes, ...]:
    """net.ipv4.tcp_fastopen_key's format: ``xxxxxxxx-xxxxxxxx-xxxxxxxx-xxxxxxxx``, and
    optionally a comma and the backup key in the same format (proc_tcp_fastopen_key).
    Raises ValueError on anything else."""
    keys = []
    parts = text.strip().split(",")
    if not 1 <= len(parts) <= 2:
        raise ValueError(f"bad Fast Open key {text!r}")
    for part in parts:
        words = part.strip().split("-")
        if len(words) != 4 or not all(1 <= len(w) <= 8 for w in words):
            raise ValueError(f"bad Fast Open key {text!r}")
        keys.append(_LE32X4.pack(*(int(w, 16) for w in words)))
    return tuple(keys)


def key_text(key: bytes) -> str:
    """A key as the sysctl prints it."""
    return "-".join(f"{w:08x}" for w in _LE32X4.unpack(key))


@dataclass(frozen=True, slots=True)
class SynCookie:
    """The Fast Open option of a SYN (Linux ``struct tcp_fastopen_cookie``): ``value``
    empty is a cookie request; ``exp`` the experimental option 254 carried it."""

    value: bytes
    exp: bool


def syn_cookie(unknown_options: tuple[tuple[int, bytes], ...]) -> SynCookie | None:
    """The Fast Open option among a SYN's options, as tcp_parse_fastopen_option reads it:
    a cookie of 4..16 bytes, or a request (no cookie).  An odd length is skipped; any
    other even length cancels what was found (Linux's ``foc->len = -1``).  None: no
    usable option.  Options are read in order, each overwriting, as Linux's parser."""
    found: SynCookie | None = None
    for kind, data in unknown_options:
        exp = False
        if kind == OPT_EXP:
            if len(data) < 2 or struct.unpack_from("!H", data)[0] != FASTOPEN_MAGIC:
                continue
            data, exp = data[2:], True
        elif kind != OPT_FASTOPEN:
            continue
        if len(data) & 1:
            continue
        found = SynCookie(bytes(data), exp) if not data or valid_length(data) else None
    return found


def cookie_option(value: bytes, exp: bool) -> tuple[int, bytes]:
    """The option (kind, data) carrying ``value`` (tcp_options_write)."""
    if exp:
        return OPT_EXP, struct.pack("!H", FASTOPEN_MAGIC) + value
    return OPT_FASTOPEN, value


def valid_length(value: bytes) -> bool:
    return COOKIE_MIN <= len(value) <= COOKIE_MAX and not len(value) & 1


@dataclass(frozen=True, slots=True)
class ServerDecision:
    """What tcp_try_fastopen decided: ``fastopen`` accept the SYN's data into a child
    now; ``reply`` the cookie option for the SYN-ACK (None: none); ``counters`` the
    LINUX_MIB names to count."""

    fastopen: bool
    reply: tuple[int, bytes] | None
    counters: tuple[str, ...]


def server_decision(*, sysctl: int, no_cookie: bool, queue_ok: bool, syn_data: bool,
                    offered: SynCookie | None, keys: tuple[bytes, ...], saddr: bytes,
                    daddr: bytes) -> ServerDecision:
    """Linux tcp_try_fastopen for a SYN a listener accepts (not a SYN cookie).

    ``sysctl`` net.ipv4.tcp_fastopen; ``no_cookie`` the listener's
    TCP_FASTOPEN_NO_COOKIE; ``queue_ok`` the listener has Fast Open on and room in its
    queue (tcp_fastopen_queue_check); ``keys`` the primary then the backup key.
    A data-less SYN with a valid cookie also opens fast: its child may send data in
    SYN-RECEIVED (Linux's note in tcp_try_fastopen).
    """
    counters: list[str] = []
    if offered is not None and not offered.value:
        counters.append("TcpExtTCPFastOpenCookieReqd")
    if not (sysctl & TFO_SERVER_ENABLE and (syn_data or offered is not None) and queue_ok):
        return ServerDecision(False, None, tuple(counters))
    exp = offered.exp if offered is not None else False
    if syn_data and (sysctl & TFO_SERVER_COOKIE_NOT_REQD or no_cookie):
        counters.append("TcpExtTCPFastOpenPassive")
        return ServerDecision(True, None, tuple(counters))
    if offered is None or not keys:
        return ServerDecision(False, None, tuple(counters))
    valid = cookie(keys[0], saddr, daddr)
    if not offered.value:  # a request: answer with the cookie
        return ServerDecision(False, cookie_option(valid, exp), tuple(counters))
    matched = 0  # tcp_fastopen_cookie_gen_check: which key's cookie it is (1-based)
    for i, key in enumerate(keys):
        if offered.value == (valid if i == 0 else cookie(key, saddr, daddr)):
            matched = i + 1
            break
    if not matched:
        counters.append("TcpExtTCPFastOpenPassiveFail")
        return ServerDecision(False, cookie_option(valid, exp), tuple(counters))
    counters.append("TcpExtTCPFastOpenPassive")
    if matched == 2:  # the backup key's cookie: hand out the primary's
        counters.append("TcpExtTCPFastOpenPassiveAltKey")
        return ServerDecision(True, cookie_option(valid, exp), tuple(counters))
    return ServerDecision(True, None, tuple(counters))


@dataclass(slots=True)
class ActiveOpen:
    """A client's Fast Open attempt (Linux tp->fastopen_req, syn_fastopen, syn_data):
    what the SYN carried and what the SYN-ACK answered (``tcp_rcv_fastopen_synack``)."""

    option_sent: bool  #: the SYN carried a Fast Open option (tp->syn_fastopen)
    exp: bool  #: in the experimental format (tp->syn_fastopen_exp)
    data_len: int  #: bytes of data in the SYN (tp->syn_data)
    #: filled in from the SYN-ACK: its cookie (None: none or an unsolicited one), its
    #: MSS, whether SYNs were retransmitted first, and how much SYN data it acknowledged
    cookie: SynCookie | None = None
    peer_mss: int | None = None
    retransmitted: bool = False
    data_acked: int = 0
    answered: bool = False


def syn_data_space(path_mss: int, cached_mss: int | None, size: int) -> int:
    """How much data a SYN carries (tcp_send_syn_data): the MSS of the path, bounded by
    the MSS the server announced last time, minus the 40 bytes of option space Linux
    keeps free for middleboxes (MAX_TCP_OPTION_SPACE), and no more than was written."""
    mss = min(path_mss, cached_mss) if cached_mss else path_mss
    return max(0, min(mss - 40, size))


@dataclass(frozen=True, slots=True)
class CachedCookie:
    """What a client remembers per server address (Linux tcp_fastopen_metrics in the
    tcp_metrics cache): the server's MSS, its cookie (empty: none) and format, and
    which option format to try for a request next (try_exp: 1 experimental, 2 RFC)."""

    mss: int = 0
    cookie: bytes = b""
    exp: bool = False
    try_exp: int = 0


def client_cookie(entry: CachedCookie | None, *, no_cookie: bool
                  ) -> tuple[bool, SynCookie | None, int | None]:
    """tcp_fastopen_cookie_check: (may the SYN carry data, the Fast Open option to send
    -- a cookie, or an empty one asking for a cookie, or None for none --, the cached
    MSS).  Without a cookie the SYN asks for one (in the experimental format when the
    last request in the RFC one went unanswered: try_exp 1)."""
    mss = entry.mss if entry is not None and entry.mss else None
    if no_cookie:
        return True, None, mss
    if entry is not None and entry.cookie:
        return True, SynCookie(entry.cookie, entry.exp), mss
    exp = entry is not None and (entry.exp or entry.try_exp == 1)
    return False, SynCookie(b"", exp), mss


def cache_update(entry: CachedCookie | None, attempt: ActiveOpen) -> CachedCookie:
    """tcp_rcv_fastopen_synack + tcp_fastopen_cache_set: remember the server's MSS and
    any cookie it gave; a request answered without a cookie (no SYN retransmitted)
    switches the next request's format (try_exp)."""
    old = entry if entry is not None else CachedCookie()
    try_exp = 0
    if (attempt.option_sent and not attempt.retransmitted and attempt.cookie is None
            and not attempt.data_len):
        try_exp = 2 if attempt.exp else 1
    mss = attempt.peer_mss or old.mss
    if attempt.cookie is not None:
        return CachedCookie(mss, attempt.cookie.value, attempt.cookie.exp, old.try_exp)
    if try_exp > old.try_exp and not old.cookie and not old.exp:
        return CachedCookie(mss, old.cookie, old.exp, try_exp)
    return CachedCookie(mss, old.cookie, old.exp, old.try_exp)
