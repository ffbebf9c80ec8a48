"""Fixtures the tests/api modules share."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from rcunet.host.network import Network


@pytest.fixture
def pair() -> Iterator[tuple[Any, Any]]:
    """(client, accepted child): one TCP connection between two threaded Hosts."""
    net, a, b = Network.two_hosts(threaded=True)
    net.start()
    srv = b.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("10.0.0.2", 7100))
    srv.listen(1)
    cli = a.socket(socket.AF_INET, socket.SOCK_STREAM)
    cli.settimeout(10)
    cli.connect(("10.0.0.2", 7100))
    child, _ = srv.accept()
    child.settimeout(10)
    yield cli, child
    for s in (cli, child, srv):
        s.close()
    net.close()
