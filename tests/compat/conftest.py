"""Unmodified standard-library and third-party code over rcunet sockets (drop-in mode).

Each test runs a server on Host ``b`` in a thread of its own (``patched(b,
this_thread=True)``) and the client on Host ``a`` (``patched(a)``, process-wide) of a
threaded two-host network; payloads are random and checked by SHA-256.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from rcunet.host.network import Network


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
