"""What a connection's engine takes from its socket's options: the ``Options`` it opens
with (``conn_options``, from the Host's sysctls and the socket's options), the ones a
live connection picks up from setsockopt (``live_options``), and the options a
listener's child copies (``inherit_from``).  The socket options themselves are set and
read in ``sockopt.py``.

A Host opens its connections with a few combinations of options, and ``Options`` is
immutable: ``ConnOptionsMemo`` (one per Host, ``TcpLayer.conn_options_memo``) keeps
the ``Options`` of each combination seen, keyed by the socket-side inputs
(``_inputs``) for the Tuning in force; a new Tuning (``Host.set_tuning``, a sysctl
write) starts a new memo.  The options are always derived from those inputs by
``_overrides`` and ``Options.from_tuning``, whose result the memo only keeps."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rcunet.core.tcp.options import SECOND, Options
from rcunet.core.tcp.window import full_space
from rcunet.host.tcp import md5

if TYPE_CHECKING:
    from rcunet.host.tcp.sock import TcpSock
    from rcunet.tuning import Tuning

#: Linux's TCP_MIN_MSS.
TCP_MIN_MSS = 88
#: Combinations a memo keeps before it starts over (a Host opens connections with few).
MEMO_MAX = 256

#: The socket options a live connection's engine reads (``_live_inputs``): nodelay,
#: cork, rto_min, rto_max, delack_max, keepalive, user_timeout (ms), notsent_lowat,
#: keepidle, keepintvl, keepcnt, syncnt.
LiveInputs = tuple[bool, bool, int, int, int, bool, int, int,
                   int | None, int | None, int | None, int | None]
#: Everything ``conn_options`` reads from the socket and its caller: the route's MSS,
#: user_mss, the path MSS, rcvbuf, sndbuf, sndbuf_locked, rcvbuf_locked, whether an MD5
#: key covers the peer, and the live inputs.
Inputs = tuple[int, int, int, int, int, bool, bool, bool, LiveInputs]


class ConnOptionsMemo:
    """A Host's connection ``Options`` by their inputs, for one Tuning at a time.

    Lock-free: ``_memo`` is one (Tuning, dict) pair, loaded once per lookup (atomic: one
    attribute load) and replaced whole by one attribute store when the Tuning changed or
    the dict is full; the dict subscript and the dict set are atomic.  Racing fills of
    one key store equal Options; a fill into a dict just replaced is lost, not wrong."""

    __slots__ = ("_memo",)

    def __init__(self) -> None:
        self._memo: tuple[object, dict[Inputs, Options]] = (None, {})

    def options(self, tuning: Tuning, inputs: Inputs) -> Options:
        memo = self._memo  # atomic: one attribute load (pairs with the stores below)
        if memo[0] is tuning:
            try:
                return memo[1][inputs]  # atomic: dict subscript (pairs with the set below)
            except KeyError:  # the first connection with these options under this Tuning
                pass
        options = Options.from_tuning(tuning, **_overrides(tuning, inputs))
        if memo[0] is not tuning or len(memo[1]) >= MEMO_MAX:
            memo = self._memo = (tuning, {})  # atomic: one attribute store
        memo[1][inputs] = options  # atomic: dict set
        return options


def conn_options(sk: TcpSock, mss: int, peer: bytes | None = None,
                 path_mss: int = 0) -> Options:
    """Engine settings for a connection of this socket: the host's sysctls
    (``Options.from_tuning``), then the socket options and the route's MSS.  The send
    buffer may grow up to tcp_wmem[2] unless SO_SNDBUF fixed it (tcp_sndbuf_expand), the
    receive buffer up to tcp_rmem[2] (tcp_rcv_space_adjust), and the window scale covers
    tcp_rmem[2], unless SO_RCVBUF fixed the receive buffer (tcp_select_initial_window).
    With a TCP_MD5SIG key for ``peer`` every segment carries the signature
    (tcp_connect_init, tcp_create_openreq_child: tcp_header_len).  ``path_mss``: a
    learned path MTU's MSS, when below ``mss`` (``Options.path_mss``)."""
    tuning = sk.host.tuning  # atomic: one attribute load; this connection's Tuning
    return sk.layer.conn_options_memo.options(tuning, _inputs(sk, mss, peer, path_mss))


def _inputs(sk: TcpSock, mss: int, peer: bytes | None, path_mss: int) -> Inputs:
    """What ``_overrides`` derives the options from, as one hashable tuple."""
    return (mss, sk.user_mss, path_mss, sk.rcvbuf, sk.sndbuf, sk.sndbuf_locked,
            sk.rcvbuf_locked, peer is not None and md5.lookup(sk.md5_keys, peer) is not None,
            _live_inputs(sk))


def _live_inputs(sk: TcpSock) -> LiveInputs:
    return (sk.nodelay, sk.cork, sk.rto_min, sk.rto_max, sk.delack_max, sk.keepalive,
            sk.user_timeout, sk.notsent_lowat, sk.keepidle, sk.keepintvl, sk.keepcnt,
            sk.syncnt)


def _overrides(tuning: Tuning, inputs: Inputs) -> dict[str, Any]:
    """``conn_options``' overrides of the sysctls."""
    (mss, user_mss, path_mss, rcvbuf, sndbuf, sndbuf_locked, rcvbuf_locked, md5_key,
     live) = inputs
    if user_mss:
        mss = min(mss, user_mss)
    overrides: dict[str, Any] = dict(
        mss=max(TCP_MIN_MSS, min(mss, 65495)), rcvbuf=rcvbuf, sndbuf=sndbuf,
        sndbuf_max=0 if sndbuf_locked else tuning.tcp_wmem[2])
    if rcvbuf_locked:
        # SO_RCVBUF also fixes the window clamp at tcp_full_space (tcp_connect_init,
        # tcp_openreq_init_rwin: SOCK_RCVBUF_LOCK)
        overrides.update(rcvbuf_max=0, wscale_space=0, window_clamp=full_space(rcvbuf))
    overrides["md5"] = md5_key
    overrides.update(_keepalive_overrides(tuning, live))
    if 0 < path_mss < mss:
        overrides["path_mss"] = max(TCP_MIN_MSS, path_mss)
    return overrides


def _keepalive_overrides(tuning: Tuning, live: LiveInputs) -> dict[str, Any]:
    """Socket-level settings; the TCP_KEEP* ones only when set (else the sysctls)."""
    (nodelay, cork, rto_min, rto_max, delack_max, keepalive, user_timeout, notsent_lowat,
     keepidle, keepintvl, keepcnt, syncnt) = live
    values: dict[str, Any] = {"nodelay": nodelay, "cork": cork,
                              "rto_min": rto_min, "rto_max": rto_max,
                              "delack_max": delack_max,
                              "keepalive": keepalive,
                              "user_timeout": user_timeout * 1_000_000,  # ms -> ns
                              "notsent_lowat": notsent_lowat or tuning.tcp_notsent_lowat}
    if keepidle is not None:
        values["keepalive_time"] = keepidle * SECOND
    if keepintvl is not None:
        values["keepalive_intvl"] = keepintvl * SECOND
    if keepcnt is not None:
        values["keepalive_probes"] = keepcnt
    if syncnt is not None:
        values["syn_retries"] = syncnt
    return values


def live_options(sk: TcpSock) -> dict[str, Any]:
    """The options a live connection picks up from setsockopt
    (``Connection.update_options``' keywords)."""
    return _keepalive_overrides(sk.host.tuning, _live_inputs(sk))


def inherit_from(sk: TcpSock, listener: TcpSock) -> None:
    """Socket options a child copies from its listener (sk_clone_lock)."""
    sk.rcvbuf, sk.sndbuf = listener.rcvbuf, listener.sndbuf
    sk.sndbuf_locked, sk.rcvbuf_locked = listener.sndbuf_locked, listener.rcvbuf_locked
    sk.nodelay, sk.keepalive = listener.nodelay, listener.keepalive
    sk.cork, sk.inq = listener.cork, listener.inq
    sk.user_timeout, sk.notsent_lowat = listener.user_timeout, listener.notsent_lowat
    sk.keepidle, sk.keepintvl, sk.keepcnt = (
        listener.keepidle, listener.keepintvl, listener.keepcnt)
    sk.user_mss, sk.linger = listener.user_mss, listener.linger
    sk.reuseaddr, sk.bound_dev = listener.reuseaddr, listener.bound_dev
    sk.zerocopy = listener.zerocopy
    sk.tos, sk.pmtudisc, sk.freebind = listener.tos, listener.pmtudisc, listener.freebind
    sk.rto_min, sk.rto_max, sk.delack_max = (
        listener.rto_min, listener.rto_max, listener.delack_max)
