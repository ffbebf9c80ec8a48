"""Interop fixtures: the Linux kernel as rcunet's peer over TAP/TUN in a namespace.

Each ``peer`` is a fresh network namespace holding the kernel's side of a TAP device
(10.77.0.1/24, fd77::1/64) and an rcunet Host in this process on the other side
(10.77.0.2/24, fd77::2/64).  ``tun_peer`` does the same over TUN on 10.77.1.0/24 and
fd77:1::/64.  Kernel-side tools run with ``peer.ns.run([...])`` (``ip netns exec``);
everything is removed when the test ends, pass or fail.

These tests need root (CI runs as root).  A developer run without root skips them with
the reason; under ``CI`` a missing privilege fails instead.  A missing tool fails, naming
the Debian package that ``scripts/test`` installs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from iop_support import NS_PREFIX, TOOLS_USED, Peer, close_peer, make_peer

from rcunet.link.netns import sweep_stale


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.interop)


def pytest_terminal_summary(terminalreporter) -> None:  # type: ignore[no-untyped-def]
    if not TOOLS_USED:
        return
    terminalreporter.section("interop: real tools exercised")
    width = max(len(tool) for tool in TOOLS_USED)
    for tool, count in sorted(TOOLS_USED.items()):
        terminalreporter.write_line(f"{tool:<{width}}  {count:>4} check(s)")


@pytest.fixture(autouse=True)
def _require_root(request: pytest.FixtureRequest) -> None:
    if os.geteuid() == 0 or getattr(request.module, "NEEDS_ROOT", True) is False:
        return
    message = "interop tests need root (network namespaces, TAP/TUN devices)"
    if os.environ.get("CI"):
        pytest.fail(message + "; CI must run them as root", pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session", autouse=True)
def _sweep() -> None:
    if os.geteuid() == 0:
        sweep_stale(NS_PREFIX)


@pytest.fixture
def peer() -> Iterator[Peer]:
    p = make_peer("tap")
    try:
        yield p
    finally:
        close_peer(p)


@pytest.fixture
def tun_peer() -> Iterator[Peer]:
    p = make_peer("tun")
    try:
        yield p
    finally:
        close_peer(p)
