"""Reading without a lock on free-threaded CPython: the two pitfalls, and the one place
they are explained (modules that work around them point here).  Measured by
``python -m rcunet.sync.ftbench``.

It lives in core because every layer needs it, core included (``Connection`` and the
engine's buffers are read by whichever thread holds the socket lock), and it is pure:
it chooses a class layout at import and touches no thread, clock or socket.  DESIGN's
layering (``api -> host -> tables/sync -> core -> wire``) therefore keeps it below sync;
``rcunet.sync.shared`` re-exports it for the layers above.

1. ``__slots__`` on objects other threads read.

   On GIL builds ``__slots__`` is the fastest layout (no dict, one descriptor load per
   attribute).  On free-threaded CPython 3.13 it is the slowest for an object that a thread
   other than its creator reads: a ``__slots__`` read (``PyMember_GetOne``, structmember.c)
   tries ``_Py_TryIncrefCompare`` on the value and, when that fails, takes the *instance's*
   critical section (a per-object mutex) and does a plain incref that never marks the value
   as shared.  The try fails whenever the value belongs to another thread and its shared
   refcount is 0 (e.g. a port int above 256, an address ``bytes``, a key tuple made by the
   writer), so every such read from a reader thread takes that mutex, for as long as the
   object lives - two readers of one table entry queue on it.  An ordinary attribute (inline
   values or managed dict, ``_PyObject_TryGetInstanceAttribute``) falls back the same way the
   first time but with ``_Py_NewRefWithLock``, which marks the value shared
   (``_Py_REF_MAYBE_WEAKREF``): later reads are one atomic add on the shared refcount, no
   lock.  Slot writes take the instance's critical section on every store.

   ``lockfree_read_slots`` gives a class ``__slots__`` on GIL builds and an ordinary
   attribute dict on free-threaded builds: apply it to classes whose instances are read by
   other threads on hot paths (table entries and buckets read by lockless lookups), never to
   thread-private ones.  Attribute *semantics* are the same either way, except that on a
   free-threaded build an unknown attribute name can be stored (so keep typos out with the
   GIL lane's tests, where the slots are real).

2. ``dict.get`` with a key another thread did not store.  On free-threaded 3.13
   ``dict.get`` is a critical-section method; when its lock-free lookup cannot take a
   reference - the probe is equal to but not the stored key (a fresh ``bytes`` address
   from a packet, a new ``(dst, oif)`` tuple, ``get_ident()``'s new int each call), or
   the dict or value belongs to another thread - it takes the dict's lock again inside
   its own critical section and spins (20-80 us).  A subscript (``d[k]`` in ``try``, or
   ``k in d`` then ``d[k]``) falls back to one plain lock instead, so hot lookups in
   dicts other threads fill are subscripts, never ``.get``.  Dicts only their owner
   thread touches, and dicts of immutable keys stored by the reader itself, may use
   ``.get``.
"""

from __future__ import annotations

import sysconfig

#: True on a free-threaded build (``--disable-gil``), whether or not the GIL was
#: re-enabled at run time: the layout is chosen at class creation and the slow path
#: above exists on these builds either way.
FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

_DICT = "__dict__"
_WEAKREF = "__weakref__"


def lockfree_read_slots(*names: str, base: type = object,
                        free_threaded: bool = FREE_THREADED) -> tuple[str, ...]:
    """The ``__slots__`` for a class whose instances other threads read without a lock.

    GIL build: ``names`` as given.  Free-threaded build: ``("__dict__",)`` (plus
    ``"__weakref__"`` if named) for a root class, and ``()`` for a subclass of a class
    that already has a dict (pass it as ``base``), so instances keep ordinary attributes
    (module docstring: why).  ``free_threaded`` is for tests."""
    for name in names:
        if not isinstance(name, str) or not name.isidentifier():
            raise TypeError(f"slot names must be identifiers, got {name!r}")
    if not free_threaded:
        return names
    if _has_dict(base):
        return ()
    return (_DICT,) + ((_WEAKREF,) if _WEAKREF in names else ())


def _has_dict(cls: type) -> bool:
    """Do instances of ``cls`` already have an attribute dict (managed or at an
    offset)?"""
    return cls.__dictoffset__ != 0
