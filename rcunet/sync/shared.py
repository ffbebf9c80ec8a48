"""Re-exported from ``rcunet.core.freethreaded`` (where core can use it too): how to lay out
objects that other threads read without a lock."""

from rcunet.core.freethreaded import FREE_THREADED, lockfree_read_slots

__all__ = ["FREE_THREADED", "lockfree_read_slots"]
