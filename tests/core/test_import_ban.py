"""core/ is sans-IO: no module under rcunet/core imports threading, time, socket, random or os.

Checked on the source: every ``import``/``from`` statement at any depth (function-local
ones included) and any ``__import__``/``importlib`` use.
"""

from __future__ import annotations

import ast
import importlib
import pathlib

import pytest

import rcunet.core

BANNED = {"threading", "time", "socket", "random", "os", "_thread", "asyncio", "select",
          "selectors", "subprocess", "secrets"}
CORE = pathlib.Path(rcunet.core.__file__).parent
MODULES = sorted(CORE.rglob("*.py"))


def imported_roots(path: pathlib.Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            roots.add("__import__")
    return roots


def test_core_has_modules() -> None:
    assert any(p.name == "connection.py" for p in MODULES)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(CORE)))
def test_module_imports_nothing_banned(path: pathlib.Path) -> None:
    bad = imported_roots(path) & (BANNED | {"__import__", "importlib"})
    assert not bad, f"{path} imports {sorted(bad)}"


def test_detector_sees_nested_and_dynamic_imports(tmp_path: pathlib.Path) -> None:
    src = tmp_path / "m.py"
    src.write_text("def f():\n    import time.x\n    from os import path\n    __import__('y')\n")
    assert imported_roots(src) == {"time", "os", "__import__"}


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(CORE)))
def test_module_imports_cleanly(path: pathlib.Path) -> None:
    rel = path.relative_to(CORE.parent.parent).with_suffix("")
    name = ".".join(rel.parts)
    if name.endswith(".__init__"):
        name = name[: -len(".__init__")]
    importlib.import_module(name)
