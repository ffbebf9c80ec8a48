"""Unmodified standard-library and third-party code over rcunet sockets (drop-in mode).

Each test runs a server on Host ``b`` in a thread of its own (``patched(b,
this_thread=True)``) and the client on Host ``a`` (``patched(a)``, process-wide) of a
threaded two-host network; payloads are random and checked by SHA-256.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

import rcunet
from rcunet.host.network import Network


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture
def payload() -> bytes:
    return os.urandom(1 << 20)


@pytest.fixture
def net() -> Iterator[tuple[Network, Any, Any]]:
    network, a, b = Network.two_hosts(threaded=True)
    network.start()
    yield network, a, b
    network.close()
    leftover = [t.name for t in threading.enumerate() if t.name.startswith(("a-", "b-"))]
    assert not leftover, f"threads left behind: {leftover}"


class ServerThread:
    """``target(ready)`` in a thread patched to ``host``; ``ready.set(value)`` hands the
    test whatever it needs (a server object to shut down, a port)."""

    def __init__(self, host: Any, target: Callable[[Any], None]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(host, target), daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "server did not start"
        if self.error is not None:
            raise self.error

    def set(self, value: Any = None) -> None:
        self.value = value
        self._ready.set()

    def _run(self, host: Any, target: Callable[[Any], None]) -> None:
        try:
            with rcunet.patched(host, this_thread=True):
                target(self)
        except BaseException as exc:  # reported by join()
            self.error = exc
            self._ready.set()

    def join(self, timeout: float = 20) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "server thread did not end"
        if self.error is not None:
            raise self.error
