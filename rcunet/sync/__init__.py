"""Concurrency primitives: named instrumented locks (lock_stat, lockdep), epoch-based RCU,
rcuref and the legacy inc-not-zero refcount, deferred-free lists and a buffer pool, and
named scheduling hooks for deterministic race tests.  See docs/locking.md."""
