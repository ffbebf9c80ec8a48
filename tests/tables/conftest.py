"""Fixtures for the socket-table tests (helpers live in tables_helpers.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tables_helpers import FakeClock, make_tables

from rcunet.tables import TcpHashInfo


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def tables_factory(clock: FakeClock) -> Callable[..., TcpHashInfo]:
    def factory(seed: int = 1, **tuning: object) -> TcpHashInfo:
        return make_tables(seed, clock, **tuning)

    return factory
