"""Stateful property test (hypothesis): the established hash and the bind tables against
a dict model, through connect() autoselect, explicit bind(), close(), TIME_WAIT entry and
expiry, and duplicate inserts.

Invariants after every step: every modelled 4-tuple is found by a lockless lookup and
maps to the modelled entry; nothing else is hashed; the ports in use are exactly the
ports the model's sockets and TIME_WAIT entries hold, with the same owners; refcounts
are back at their base (1) once each lookup's pin is dropped.
"""

from __future__ import annotations

import errno

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule
from tables_helpers import D4, L4, FakeClock, make_tables, sock

from rcunet.tables import SockEntry, State, TableEntry
from rcunet.tables.ehash import put_entry

LOW, HIGH = 40000, 40007
DPORTS = (80, 81)


class TablesModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.tables = make_tables(3, clock=self.clock, ip_local_port_range=(LOW, HIGH))
        self.hashed: dict[tuple[bytes, int, bytes, int], TableEntry] = {}  # model ehash
        self.bound: dict[int, SockEntry] = {}  # explicitly bound, unconnected sockets

    def _owners(self) -> dict[int, set[int]]:
        owners: dict[int, set[int]] = {}
        for e in list(self.hashed.values()) + list(self.bound.values()):
            owners.setdefault(e.lport, set()).add(id(e))
        return owners

    @rule(dport=st.sampled_from(DPORTS))
    def connect(self, dport):
        sk = sock(L4)
        free = [p for p in range(LOW, HIGH + 1)
                if p not in self.bound and (L4, p, D4, dport) not in self.hashed]
        try:
            port = self.tables.connect(sk, D4, dport)
        except OSError as exc:
            assert exc.errno == errno.EADDRNOTAVAIL
            assert free == [], f"connect failed with free ports {free}"
            return
        assert port in free
        sk.state = State.ESTABLISHED
        self.hashed[sk.key] = sk

    @rule(port=st.integers(LOW, HIGH + 2))
    def bind(self, port):
        sk = sock(L4)
        in_use = port in self._owners()
        try:
            self.tables.bind_socket(sk, L4, port)
        except OSError as exc:
            assert exc.errno == errno.EADDRINUSE and in_use
            return
        assert not in_use
        self.bound[port] = sk

    @rule(data=st.data())
    def close_connection(self, data):
        socks = [e for e in self.hashed.values() if e.state != State.TIME_WAIT]
        if not socks:
            return
        sk = data.draw(st.sampled_from(socks))
        key = sk.key
        self.tables.close(sk)
        del self.hashed[key]

    @rule(data=st.data())
    def enter_time_wait(self, data):
        socks = [e for e in self.hashed.values() if e.state != State.TIME_WAIT]
        if not socks:
            return
        sk = data.draw(st.sampled_from(socks))
        key = sk.key
        tw = self.tables.time_wait(sk, timeout=10**9)  # no timestamps: never reused
        assert tw is not None
        self.hashed[key] = tw

    @rule(data=st.data())
    def expire_time_wait(self, data):
        tws = [e for e in self.hashed.values() if e.state == State.TIME_WAIT]
        if not tws:
            return
        tw = data.draw(st.sampled_from(tws))
        assert self.tables.tw_kill(tw)
        del self.hashed[tw.key]

    @rule(data=st.data())
    def close_bound(self, data):
        if not self.bound:
            return
        port = data.draw(st.sampled_from(sorted(self.bound)))
        self.tables.close(self.bound.pop(port))

    @rule(data=st.data())
    def duplicate_insert_is_refused(self, data):
        if not self.hashed:
            return
        key = data.draw(st.sampled_from(sorted(self.hashed)))
        dup = SockEntry(self.hashed[key].family, *key, state=State.ESTABLISHED)
        assert not self.tables.ehash.insert(dup)

    @invariant()
    def ehash_matches_model(self):
        ehash = self.tables.ehash
        assert len(ehash) == len(self.hashed)
        for key, entry in self.hashed.items():
            found = ehash.lookup(*key)
            assert found is entry
            put_entry(found)
            assert entry.ref.read() == 1
        for port in range(LOW, HIGH + 3):
            for dport in DPORTS:
                if (L4, port, D4, dport) not in self.hashed:
                    assert ehash.lookup(L4, port, D4, dport) is None

    @invariant()
    def bind_tables_match_model(self):
        owners = self._owners()
        bind = self.tables.bind
        assert bind.ports_in_use() == set(owners)
        for port, ids in owners.items():
            assert {id(o) for o in bind.owners_of(port)} == ids
        assert all(tb2.owners for tb2 in bind.all_tb2())


TablesModel.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestTablesModel = TablesModel.TestCase
