"""Which build of rcunet runs: its compiled modules, or the pure-Python source of every one.

``pip install .`` compiles the hot-path modules (setup.py lists them) where a C compiler
works; the ``.py`` source of each is installed beside it either way.  The choice is made
once, by ``select()`` at ``import rcunet``, for the whole package:

- ``RCUNET_PURE=1`` puts a finder first on ``sys.meta_path`` that loads every ``rcunet.*``
  module from its ``.py`` file, so no compiled module is ever loaded (an editable install
  keeps its ``.so`` files beside the sources: the finder skips them there too).
- Otherwise every compiled module found in the package is imported now.  If one fails
  (an ABI mismatch, a corrupt or foreign file) or is older than its source (an editable
  install edited since its last build), every module this attempt imported is dropped
  again, one ``CompiledBuildWarning`` says why, and the package loads from source, as
  with ``RCUNET_PURE=1``: a stack is all compiled or all pure, never half of each.

``describe()`` is what ``rcunet --version`` and the benchmarks print.

This module imports nothing from rcunet: it runs while the package itself initialises.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
import sys
import warnings
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Sequence

#: The environment variable that forces pure Python.
PURE_ENV = "RCUNET_PURE"
#: The compiler the build uses (setup.py).
COMPILER = "mypyc"

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
_EXTENSION_SUFFIXES = tuple(importlib.machinery.EXTENSION_SUFFIXES)


class CompiledBuildWarning(RuntimeWarning):
    """The compiled modules could not be used; the package runs from its source."""


class Build:
    """What ``select()`` chose: ``compiled`` or not, the compiled modules in use, and why
    the source runs instead (``reason``: empty when nothing compiled is installed).
    A plain class: ``import rcunet`` stays as light as it can."""

    __slots__ = ("compiled", "modules", "reason")

    def __init__(self, compiled: bool, modules: tuple[str, ...] = (), reason: str = "") -> None:
        self.compiled = compiled
        self.modules = modules
        self.reason = reason

    def __repr__(self) -> str:
        return f"Build(compiled={self.compiled}, modules={self.modules!r}, reason={self.reason!r})"


_current = Build(compiled=False, reason="rcunet.build.select() has not run")


def current() -> Build:
    return _current


def pure_forced() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() not in ("", "0", "no", "false", "off")


def interpreter() -> str:
    """``CPython 3.13.5 free-threaded`` / ``CPython 3.11.7``."""
    name = {"cpython": "CPython", "pypy": "PyPy"}.get(sys.implementation.name,
                                                      sys.implementation.name)
    version = sys.version.split()[0]
    gil = getattr(sys, "_is_gil_enabled", None)
    if gil is None:
        return f"{name} {version}"
    return f"{name} {version} free-threaded, GIL {'on' if gil() else 'off'}"


def describe() -> str:
    """One line: the build that runs and the interpreter running it."""
    build = _current
    if build.compiled:
        kind = f"compiled ({COMPILER}, {len(build.modules)} modules)"
    elif build.reason:
        kind = f"pure Python ({build.reason})"
    else:
        kind = "pure Python (no compiled modules installed)"
    return f"{kind}; {interpreter()}"


# -- finding the compiled modules ----------------------------------------------------------
def compiled_modules(package_dir: str = _PACKAGE_DIR) -> list[tuple[str, str]]:
    """(module name, extension file) of every compiled module under ``package_dir``, for
    this interpreter's extension suffixes (another interpreter's files are not ours)."""
    found = []
    root = os.path.dirname(package_dir)
    for directory, subdirs, files in os.walk(package_dir):
        subdirs[:] = [d for d in subdirs if d != "__pycache__"]
        for filename in files:
            suffix = next((s for s in _EXTENSION_SUFFIXES if filename.endswith(s)), None)
            # Another interpreter's file (rto.cpython-311-...so seen by 3.13t, whose
            # suffixes include a bare .so) is not a module name here: not ours.
            if suffix is None or not filename[: -len(suffix)].isidentifier():
                continue
            path = os.path.join(directory, filename)
            parts = os.path.relpath(path, root)[: -len(suffix)].split(os.sep)
            if parts[-1] == "__init__":
                parts.pop()
            found.append((".".join(parts), path))
    return sorted(found)


def _stale(extension: str) -> bool:
    """The module's ``.py`` source was changed after its extension was built."""
    source = _source_of(extension)
    try:
        return source is not None and os.stat(source).st_mtime > os.stat(extension).st_mtime
    except OSError:
        return False


def _source_of(extension: str) -> str | None:
    for suffix in _EXTENSION_SUFFIXES:
        if extension.endswith(suffix):
            return extension[: -len(suffix)] + ".py"
    return None


# -- loading from source ---------------------------------------------------------------------
class SourceFinder:
    """Finds ``rcunet.*`` modules by their ``.py`` source only (never a compiled file).
    A meta-path finder by protocol (importlib.abc would import importlib.resources)."""

    def __init__(self) -> None:
        self._finders: dict[str, importlib.machinery.FileFinder] = {}

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if path is None or not fullname.startswith("rcunet."):
            return None
        for entry in path:
            finder = self._finders.get(entry)
            if finder is None:
                loaders = (importlib.machinery.SourceFileLoader,
                           importlib.machinery.SOURCE_SUFFIXES)
                finder = self._finders[entry] = importlib.machinery.FileFinder(entry, loaders)
            spec = finder.find_spec(fullname, target)
            if spec is not None and spec.loader is not None:
                return spec
        return None

    def invalidate_caches(self) -> None:
        for finder in self._finders.values():
            finder.invalidate_caches()


def _use_source() -> None:
    if not any(isinstance(finder, SourceFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, SourceFinder())


def _load_compiled(modules: list[tuple[str, str]]) -> str:
    """Import every compiled module; '' when all loaded, else why not (and nothing this
    call imported is left in ``sys.modules``)."""
    stale = [name for name, path in modules if _stale(path)]
    if stale:
        return f"{stale[0]} is older than its source: rebuild (pip install .)"
    before = set(sys.modules)
    loading = ""
    try:
        for loading, _path in modules:
            module = importlib.import_module(loading)
            if not (getattr(module, "__file__", None) or "").endswith(_EXTENSION_SUFFIXES):
                raise ImportError(f"{loading} did not load from its compiled file")
    except Exception as exc:  # any failure means the source runs: say which and why
        for name in set(sys.modules) - before:
            if name.startswith("rcunet.") or name.endswith("__mypyc"):
                del sys.modules[name]
        importlib.invalidate_caches()
        return f"{loading} failed to load: {type(exc).__name__}: {exc}"
    return ""


def select() -> Build:
    """Choose the build for this process (``rcunet/__init__`` calls it once)."""
    global _current
    if pure_forced():
        _use_source()
        _current = Build(compiled=False, reason=f"{PURE_ENV}=1")
        return _current
    modules = compiled_modules()
    if not modules:
        _current = Build(compiled=False)
        return _current
    reason = _load_compiled(modules)
    if reason:
        _use_source()
        _current = Build(compiled=False, reason="compiled build unusable")
        warnings.warn(CompiledBuildWarning(f"rcunet: running the pure-Python source: {reason}"),
                      stacklevel=3)
        return _current
    _current = Build(compiled=True, modules=tuple(name for name, _path in modules))
    return _current
