"""lockfree_read_slots: __slots__ on GIL builds, an attribute dict on free-threaded ones."""

from __future__ import annotations

import sysconfig
import weakref

import pytest

from rcunet.core.freethreaded import FREE_THREADED, lockfree_read_slots
from rcunet.tables.bind import Bind2Bucket, BindBucket
from rcunet.tables.entry import AF_INET, SockEntry, TableEntry, TimeWaitEntry


def test_free_threaded_flag_matches_the_build():
    assert FREE_THREADED == bool(sysconfig.get_config_var("Py_GIL_DISABLED"))


def test_gil_build_layout_is_the_slots_given():
    assert lockfree_read_slots("a", "b", "__weakref__", free_threaded=False) == (
        "a", "b", "__weakref__")


def test_free_threaded_root_gets_a_dict_and_keeps_weakref():
    assert lockfree_read_slots("a", "__weakref__", free_threaded=True) == (
        "__dict__", "__weakref__")
    assert lockfree_read_slots("a", free_threaded=True) == ("__dict__",)


def test_free_threaded_subclass_of_a_dict_class_adds_nothing():
    class Root:
        __slots__ = lockfree_read_slots("x", free_threaded=True)

    assert lockfree_read_slots("y", base=Root, free_threaded=True) == ()


def test_free_threaded_subclass_of_a_slots_class_gets_a_dict():
    class Root:
        __slots__ = ("x",)

    assert lockfree_read_slots("y", base=Root, free_threaded=True) == ("__dict__",)


@pytest.mark.parametrize("free_threaded", [False, True])
def test_both_layouts_build_working_classes(free_threaded):
    class Root:
        __slots__ = lockfree_read_slots("x", "__weakref__", free_threaded=free_threaded)

        def __init__(self) -> None:
            self.x = 1

    class Child(Root):
        __slots__ = lockfree_read_slots("y", base=Root, free_threaded=free_threaded)

        def __init__(self) -> None:
            super().__init__()
            self.y = 2

    c = Child()
    assert (c.x, c.y) == (1, 2)
    assert weakref.ref(c)() is c
    assert hasattr(c, "__dict__") is free_threaded


def test_bad_names_are_refused():
    with pytest.raises(TypeError):
        lockfree_read_slots("not a name")
    with pytest.raises(TypeError):
        lockfree_read_slots(3)  # type: ignore[arg-type]


def test_table_classes_use_the_running_build_layout():
    """Entries and bind buckets, read by lockless lookups, follow the build: dict
    attributes on free-threaded CPython, real slots (no __dict__) with the GIL."""
    sk = SockEntry(AF_INET, b"\x0a\0\0\x01")
    tw = TimeWaitEntry(sk, now=0, expires_at=1)
    tb = BindBucket(40000)
    for obj in (sk, tw, tb, Bind2Bucket(tb, b"\0" * 16), TableEntry(AF_INET, b"\0" * 4)):
        assert hasattr(obj, "__dict__") is FREE_THREADED, type(obj).__name__
    if not FREE_THREADED:
        with pytest.raises(AttributeError):
            sk.no_such_field = 1  # type: ignore[attr-defined]
