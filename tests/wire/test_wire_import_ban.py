"""``rcunet.wire`` is pure: no module in it imports threading, time, socket, random or os
(DESIGN.md, Layers).  Modules are found by walking the package, so modules added later are
covered without touching this file."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import rcunet.wire

#: The banned modules, with the C modules behind them (importing those is the same thing).
BANNED = frozenset(
    {"threading", "_thread", "time", "socket", "_socket", "random", "_random", "os", "posix",
     "nt"}
)
WIRE_DIR = Path(rcunet.wire.__file__).parent


def wire_module_files() -> dict[str, Path]:
    """Module name -> source file, for every module of the package (subpackages too)."""
    modules = {}
    for path in sorted(WIRE_DIR.rglob("*.py")):
        parts = path.relative_to(WIRE_DIR).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(("rcunet", "wire", *parts))] = path
    return modules


def _top_level(dotted: str) -> str:
    return dotted.split(".")[0]


def _literal_import(node: ast.Call) -> str | None:
    """The module named by ``__import__("x")`` or ``importlib.import_module("x")``."""
    func = node.func
    is_dunder = isinstance(func, ast.Name) and func.id == "__import__"
    is_importlib = isinstance(func, ast.Attribute) and func.attr == "import_module"
    if (is_dunder or is_importlib) and node.args and isinstance(node.args[0], ast.Constant):
        value = node.args[0].value
        return value if isinstance(value, str) else None
    return None


def imported_top_levels(source: str, module: str) -> set[str]:
    """Top-level names of every module an import statement anywhere in ``source`` names
    (inside functions and ``if TYPE_CHECKING`` blocks too); relative imports resolve
    inside ``module``'s package."""
    names = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(_top_level(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                names.add(_top_level(module))  # relative: stays inside the package
            elif node.module:
                names.add(_top_level(node.module))
        elif isinstance(node, ast.Call):
            target = _literal_import(node)
            if target is not None:
                names.add(_top_level(target))
    return names


def test_the_walk_finds_the_codecs() -> None:
    modules = wire_module_files()
    for expected in ("rcunet.wire", "rcunet.wire.checksum", "rcunet.wire.udp",
                     "rcunet.wire.ipv4", "rcunet.wire.ethernet"):
        assert expected in modules


def test_no_wire_module_imports_a_banned_module() -> None:
    offenders = {}
    for module, path in wire_module_files().items():
        banned = imported_top_levels(path.read_text(encoding="utf-8"), module) & BANNED
        if banned:
            offenders[module] = sorted(banned)
    assert offenders == {}, f"wire/ must not use threads, clocks, sockets, RNG, OS: {offenders}"


def test_the_checker_sees_every_form_of_import() -> None:
    source = """
import struct, os.path
from time import monotonic
from . import checksum
def later():
    import random
    return __import__("socket"), importlib.import_module("threading.local")
if TYPE_CHECKING:
    from _thread import LockType
"""
    found = imported_top_levels(source, "rcunet.wire.example")
    assert found & BANNED == {"os", "time", "random", "socket", "threading", "_thread"}
    assert {"struct", "rcunet"} <= found


def test_every_module_imports_in_a_fresh_interpreter() -> None:
    # A fresh interpreter: nothing imported by the test run hides a broken import, and the
    # walk over the package agrees with the files on disk.
    code = (
        "import importlib, json, pkgutil, rcunet.wire as w\n"
        "names = ['rcunet.wire'] + [m.name for m in "
        "pkgutil.walk_packages(w.__path__, 'rcunet.wire.')]\n"
        "for name in names: importlib.import_module(name)\n"
        "print(json.dumps(sorted(names)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == sorted(wire_module_files())
