"""A TCP socket's life (rcunet.host.tcp.life): the steps real sockets take, in order, and
the transitions the table forbids."""

from __future__ import annotations

import socket
import threading

import pytest
from tcp_helpers import connected_pair

from rcunet.api import host_socket
from rcunet.core.tcp import State as CState
from rcunet.core.tcp.timewait import TimeWait
from rcunet.host.network import Network
from rcunet.host.tcp.life import (
    CLOSE,
    FINISHED,
    FORGOTTEN,
    LISTEN_CLOSED,
    UNHASHED,
    USER_CLOSED,
    LifeError,
    advance,
    ask_teardown,
    describe,
    reopen,
    table_state,
)
from rcunet.sync import hooks
from rcunet.tables.entry import State


class _Sock:
    """What host/tcp/life.py needs of a socket: its life and the wq lock that guards it."""

    def __init__(self, life: int = 0) -> None:
        self.life = life
        self.wq = threading.Lock()


def test_each_step_is_taken_once():
    sk = _Sock()
    assert advance(sk, USER_CLOSED)
    assert not advance(sk, USER_CLOSED)
    assert advance(sk, FINISHED)
    assert advance(sk, UNHASHED)
    assert advance(sk, FORGOTTEN)
    assert not advance(sk, FORGOTTEN)
    assert describe(sk.life) == "USER_CLOSED|FINISHED|UNHASHED|FORGOTTEN"


@pytest.mark.parametrize("life", [0, USER_CLOSED, FINISHED, LISTEN_CLOSED | FINISHED,
                                  USER_CLOSED | FINISHED, FINISHED | UNHASHED])
def test_forgotten_needs_user_closed_and_unhashed(life):
    # USER_CLOSED | FINISHED: a teardown claimed, the socket still in ehash and bhash
    sk = _Sock(life)
    with pytest.raises(LifeError, match="FORGOTTEN"):
        advance(sk, FORGOTTEN)
    assert sk.life == life


def test_reopen_only_from_finished():
    sk = _Sock()
    assert not reopen(sk)  # still tearing down: connect() says EALREADY
    advance(sk, FINISHED)
    assert not reopen(sk)  # the teardown is still unhashing it
    advance(sk, UNHASHED)
    assert reopen(sk)
    assert sk.life == 0
    closed = _Sock(USER_CLOSED | FINISHED | UNHASHED)
    with pytest.raises(LifeError):
        reopen(closed)


def test_concurrent_takers_one_wins():
    """Every step taken by several threads at once: exactly one taker of each, and no
    step lost (four threads read-modify-write the same int)."""
    for _ in range(200):
        sk = _Sock()
        wins: list[int] = []
        barrier = threading.Barrier(4)

        def take(step: int, sk: _Sock = sk, barrier: threading.Barrier = barrier,
                 wins: list[int] = wins) -> None:
            barrier.wait()
            if advance(sk, step):
                wins.append(step)

        threads = [threading.Thread(target=take, args=(step,))
                   for step in (USER_CLOSED, FINISHED, USER_CLOSED, FINISHED)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(wins) == [USER_CLOSED, FINISHED]
        assert sk.life == USER_CLOSED | FINISHED


def test_connection_life_user_closes_first():
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk_cli, sk_child, sk_srv = host_socket(cli), host_socket(child), host_socket(srv)
    assert sk_cli.life == sk_child.life == sk_srv.life == 0
    cli.close()  # active close: FIN_WAIT, then TIME_WAIT takes the socket's place
    assert sk_cli.life & USER_CLOSED
    child.close()
    assert net.run_until(lambda: sk_cli.life & FORGOTTEN and sk_child.life & FORGOTTEN, 5)
    assert sk_cli.life == sk_child.life == USER_CLOSED | FINISHED | UNHASHED | FORGOTTEN
    srv.close()
    assert sk_srv.life == USER_CLOSED | LISTEN_CLOSED | FINISHED | UNHASHED | FORGOTTEN


def test_connection_life_engine_finishes_first():
    """The peer resets the connection: the engine finishes while the user still holds
    the socket, which the user's close() then releases."""
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk_cli = host_socket(cli)
    child.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    child.close()  # linger {1, 0}: RST
    assert net.run_until(lambda: sk_cli.life & FINISHED, 5)
    assert sk_cli.life == FINISHED | UNHASHED
    cli.close()
    assert sk_cli.life == USER_CLOSED | FINISHED | UNHASHED | FORGOTTEN
    srv.close()


def test_close_during_teardown_forgets_only_once_unhashed():
    """The user closes while another thread's teardown has taken FINISHED but not yet
    unhashed the socket (seed004's lab saw a client port and ehash entry outlive the
    socket's place in ``sockets``): close() leaves the forgetting to that teardown."""
    net, a, b = Network.two_hosts()
    srv, cli, child = connected_pair(net, a, b)
    sk_cli = host_socket(cli)
    seen: list[tuple[bool, bool, bool]] = []

    def before_unhash() -> None:
        if sk_cli.life & FINISHED and not sk_cli.life & USER_CLOSED:
            cli.close()  # the user, in the middle of the engine's teardown
            seen.append((sk_cli in a.tcp.sockets, a.tcp.hashinfo.ehash.contains(sk_cli),
                         bool(sk_cli.life & FORGOTTEN)))

    child.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
    with hooks.installed({"tcp.finish.before_unhash": before_unhash}):
        child.close()  # linger {1, 0}: RST, which finishes the client's connection
        assert net.run_until(lambda: sk_cli.life & FORGOTTEN, 5)
    assert seen == [(True, True, False)]  # still hashed, so still among the sockets
    assert sk_cli.life == USER_CLOSED | FINISHED | UNHASHED | FORGOTTEN
    assert sk_cli not in a.tcp.sockets and not a.tcp.hashinfo.ehash.contains(sk_cli)
    assert not a.tcp.hashinfo.bind.ports_in_use()
    srv.close()


def test_listener_shutdown_then_close():
    net, a, b = Network.two_hosts()
    srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("10.0.0.2", 8080))
    srv.listen(4)
    sk = host_socket(srv)
    srv.shutdown(socket.SHUT_RD)  # the listener stops listening; the user still holds it
    assert sk.life == LISTEN_CLOSED | FINISHED | UNHASHED
    srv.close()
    assert sk.life == USER_CLOSED | LISTEN_CLOSED | FINISHED | UNHASHED | FORGOTTEN


def _time_wait_state(snd_nxt: int) -> TimeWait:
    return TimeWait(snd_nxt=snd_nxt, rcv_nxt=1, ts_ok=False, ts_recent=0, ts_recent_stamp=0,
                    ts_offset=0, window=1000, timeout=60 * 10**9)


def test_teardown_request_time_wait_wins_over_a_close() -> None:
    """One field holds the teardown the engine asked for: TIME_WAIT (with the state its
    entry keeps) whichever order the close and TIME_WAIT were asked in."""
    tw = _time_wait_state(5)
    assert ask_teardown(None, CLOSE) is CLOSE
    assert ask_teardown(None, tw) is tw
    assert ask_teardown(tw, CLOSE) is tw
    assert ask_teardown(CLOSE, tw) is tw
    later = _time_wait_state(6)
    assert ask_teardown(tw, later) is later


def test_table_state_shows_every_engine_state() -> None:
    assert table_state(CState.SYN_RECEIVED) is State.SYN_RECV
    assert table_state(CState.TIME_WAIT) is State.TIME_WAIT
    assert {table_state(state) for state in CState} <= set(State)
    assert len({table_state(state) for state in CState}) == len(CState)
