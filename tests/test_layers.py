"""The import graph follows DESIGN's layering: ``api -> host -> tables/sync -> core -> wire``.

Read from the AST of every module under rcunet/ (imports at any depth, function-local ones
included; ``if TYPE_CHECKING:`` imports count for the layer rules, since a type that
points upward is a dependency too, but not for circles, which only happen at run time):

* a module imports nothing from a layer above its own (wire and core import nothing above
  them; host never imports api);
* no import circle between modules.

A failure names the offending import (file:line) or the circle.
"""

from __future__ import annotations

import ast
import pathlib
from collections.abc import Iterator
from typing import NamedTuple

import pytest

import rcunet

ROOT = pathlib.Path(rcunet.__file__).parent
#: Layer of each top-level part of rcunet; a module may import its own layer and below.
#: tuning (the sysctl-like settings) sits with sync, below the tables that read it; link
#: (drivers) sits with host, which it attaches to.  Anything not listed (bench, lab,
#: services, cmd, cli, drill...) is an application on top: it may import everything,
#: and nothing below may import it.  The root package only carries the version and the
#: choice of build (rcunet.build), which imports nothing from rcunet.
RANK = {"": 0, "build": 0, "wire": 0, "core": 1, "sync": 2, "tuning": 2, "tables": 3, "host": 4,
        "link": 4, "api": 5}
TOP = 6


class Import(NamedTuple):
    source: str  # importing module
    target: str  # imported module (or package)
    path: pathlib.Path
    line: int
    type_only: bool


def module_name(path: pathlib.Path, root: pathlib.Path = ROOT) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    name = ".".join(rel.parts)
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def imports_of(path: pathlib.Path, modules: set[str], root: pathlib.Path = ROOT
               ) -> Iterator[Import]:
    """Every import of an rcunet module in ``path``, resolved to a module when the name
    imported is one (``from rcunet.core.tcp import congestion``)."""
    name = module_name(path, root)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))

    def walk(node: ast.AST, type_only: bool) -> Iterator[Import]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child):
                for stmt in child.body:
                    yield from visit(stmt, True)
                for stmt in child.orelse:
                    yield from visit(stmt, type_only)
            else:
                yield from visit(child, type_only)

    def visit(node: ast.AST, type_only: bool) -> Iterator[Import]:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Import(name, alias.name, path, node.lineno, type_only)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([node.module] if node.module else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield Import(name, full if full in modules else base, path, node.lineno,
                             type_only)
        yield from walk(node, type_only)

    for found in walk(tree, False):
        if found.target.split(".")[0] == root.name:
            yield found


def layer_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def rank(module: str) -> int:
    return RANK.get(layer_of(module), TOP)


def collect(root: pathlib.Path = ROOT) -> list[Import]:
    paths = sorted(root.rglob("*.py"))
    modules = {module_name(p, root) for p in paths}
    return [found for p in paths for found in imports_of(p, modules, root)]


def upward_imports(graph: list[Import]) -> list[str]:
    return [f"{i.path}:{i.line}: {i.source} ({layer_of(i.source) or 'rcunet'}) imports "
            f"{i.target} ({layer_of(i.target)}), a layer above it"
            for i in graph if rank(i.target) > rank(i.source)]


def circles(graph: list[Import]) -> list[list[str]]:
    """Strongly connected components of more than one module (runtime imports)."""
    edges: dict[str, set[str]] = {}
    for i in graph:
        if not i.type_only and i.source != i.target:
            edges.setdefault(i.source, set()).add(i.target)
            edges.setdefault(i.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return found


GRAPH = collect()


def test_the_graph_has_the_layers() -> None:
    layers = {layer_of(i.source) for i in GRAPH}
    assert {"wire", "core", "sync", "tables", "host", "api"} <= layers
    assert any(i.source == "rcunet.core.tcp.connection" and i.target.startswith("rcunet.wire")
               for i in GRAPH)


@pytest.mark.parametrize("layer", ["wire", "core", "sync", "tables", "host", "link", "api"])
def test_no_layer_imports_a_layer_above_it(layer: str) -> None:
    bad = upward_imports([i for i in GRAPH if layer_of(i.source) == layer])
    assert not bad, "\n".join(bad)


def test_host_never_imports_api() -> None:
    bad = [i for i in GRAPH if layer_of(i.source) == "host" and layer_of(i.target) == "api"]
    assert not bad, "\n".join(f"{i.path}:{i.line}: {i.source} imports {i.target}" for i in bad)


def test_no_import_circles() -> None:
    found = circles(GRAPH)
    assert not found, "import circles: " + "; ".join(" <-> ".join(c) for c in found)


def test_detector_names_upward_imports_and_circles(tmp_path: pathlib.Path) -> None:
    root = tmp_path / "rcunet"
    for pkg in ("", "core", "host", "api", "sync"):
        (root / pkg).mkdir(parents=True, exist_ok=True)
        (root / pkg / "__init__.py").write_text("")
    (root / "core" / "engine.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from rcunet.host import thing\n")
    (root / "host" / "thing.py").write_text("def f():\n    from rcunet.api import sock\n")
    (root / "api" / "sock.py").write_text("import rcunet.host.thing\n")
    (root / "sync" / "a.py").write_text("from rcunet.sync import b\n")
    (root / "sync" / "b.py").write_text("def g():\n    from . import a\n")
    graph = collect(root)
    upward = upward_imports(graph)
    assert any("rcunet/core/engine.py:3: rcunet.core.engine (core) imports rcunet.host.thing"
               in line for line in upward)
    assert any("rcunet/host/thing.py:2: rcunet.host.thing (host) imports rcunet.api.sock"
               in line for line in upward)
    assert sorted(circles(graph)) == [["rcunet.api.sock", "rcunet.host.thing"],
                                      ["rcunet.sync.a", "rcunet.sync.b"]]
