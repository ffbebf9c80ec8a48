"""``rcunet lab seed000 --procs``: the server's Host in a child process, the client's here.

The seed measures connect()'s port search, which runs on the client: the client Host, its
``ConnectProbe``, the held flows' client ends and the tcp_crr threads stay in this
process, so the per-connect() counts and the lock statistics (the lab's statistics slice:
this process's locks, where bhash/ehash are taken) are the same measurement as in one
process.  The server's side of the scenario - the listener, the acceptors, the held
flows' server ends, their release, the server's part of the end checks - is the
``CrrServer`` of rcunet/lab/seed000.py, built in the child; the parent calls its methods
by message (``RemoteServer``) and gets their plain results back, so ``CrrScenario``
drives either the same way.  The link runs each Host's receive path in its receive
thread (``inline_rx``), as seed001/seed004 ``--procs`` do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rcunet.host.network import Network
from rcunet.host.procs import HostProcess
from rcunet.lab.seed000_server import ACCEPT_POLL, SERVER, CrrServer

#: A spawned child imports rcunet and builds its Host; a call may wait for the server's
#: settling (lab.common.SETTLE_TIMEOUT): allow for a loaded machine.
CHILD_TIMEOUT = 60.0


class RemoteServer:
    """The parent's handle on the ``CrrServer`` in b's process: calling a method sends
    its name and arguments to the child and returns the child's answer (``ChildFailed``
    with the child's traceback if the method raised there)."""

    def __init__(self, process: HostProcess) -> None:
        self._process = process

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self._process.send((name, args))
            return self._process.recv(timeout=CHILD_TIMEOUT)

        return call


def serve(child: Any, server_args: dict[str, Any]) -> None:
    """In the child: build the server on the child's Host, then run the parent's calls
    until ``close`` (the last one: everything is closed and counted) or until the parent
    stops the child (``Network.close`` on a failed run)."""
    server = CrrServer(child.host, **server_args)
    child.report("ready")
    while not child.stopping.is_set():
        try:
            name, args = child.recv(timeout=ACCEPT_POLL)
        except TimeoutError:
            continue
        child.report(getattr(server, name)(*args))
        if name == "close":
            return
    server.stop_acceptors()


def server_in_child(tuning: Any, server_args: dict[str, Any]) -> tuple[Network, Any,
                                                                         RemoteServer]:
    """A started Network with client Host ``a`` here and ``b`` in a child process that
    runs ``serve``; returns it, ``a`` and the handle on the child's server."""
    net = Network(threaded=True, tuning=tuning)
    a = net.host("a")
    b = net.host_process("b")
    net.link(a, b, ["10.0.0.1/24"], [f"{SERVER}/24"], inline_rx=True)
    net.start()
    try:
        b.start(serve, server_args)
        message = b.recv(timeout=CHILD_TIMEOUT)
        if message != "ready":
            raise RuntimeError(f"seed000 --procs: the server's process said {message!r}")
    except BaseException:
        net.close()
        raise
    return net, a, RemoteServer(b)
