"""The build selection (rcunet/build.py) and setup.py's list of compiled modules.

Each scenario runs in a fresh interpreter on a temporary copy of the package, so a
broken extension file can be planted without touching the installed one.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import pathlib
import shutil
import subprocess
import sys
import tomllib

import pytest

import rcunet
from rcunet import build

PACKAGE = pathlib.Path(rcunet.__file__).parent
#: The checkout the tests came from (its setup.py and pyproject.toml), also when rcunet
#: itself is an installed copy.
REPO = pathlib.Path(__file__).resolve().parent.parent
EXTENSION = importlib.machinery.EXTENSION_SUFFIXES[0]

#: Imports two hot-path modules and prints where each came from, the build, and the
#: warnings ``import rcunet`` raised.
PROBE = """
import warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import rcunet.wire.checksum, rcunet.core.tcp.rto
from rcunet import build
print(rcunet.wire.checksum.__file__)
print(rcunet.core.tcp.rto.__file__)
print(build.describe())
for w in caught:
    print("WARNING", w.category.__name__, w.message)
"""


def copy_package(tmp_path: pathlib.Path) -> pathlib.Path:
    """The package's source alone (no extension file, no bytecode) under ``tmp_path``."""
    shutil.copytree(PACKAGE, tmp_path / "rcunet",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.pyd"))
    return tmp_path / "rcunet"


def run_probe(root: pathlib.Path, **env: str) -> list[str]:
    environ = {k: v for k, v in os.environ.items() if k != build.PURE_ENV}
    environ.update(env, PYTHONPATH=str(root), PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run([sys.executable, "-c", PROBE], cwd=root, env=environ,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_source_only_package_runs_pure_without_a_warning(tmp_path):
    package = copy_package(tmp_path)
    lines = run_probe(tmp_path)
    assert lines[0] == str(package / "wire" / "checksum.py")
    assert lines[2].startswith("pure Python (no compiled modules installed); ")
    assert not [line for line in lines if line.startswith("WARNING")]


def test_a_broken_compiled_module_makes_the_whole_package_pure_with_one_warning(tmp_path):
    """A corrupt extension (as an ABI mismatch would) beside a good source: the package
    loads every module from source, rto included although its file was never touched,
    and says so once."""
    package = copy_package(tmp_path)
    (package / "wire" / f"checksum{EXTENSION}").write_bytes(b"\x7fELF not really" * 64)
    (package / "core" / "tcp" / f"rto{EXTENSION}").write_bytes(b"\x7fELF not really" * 64)
    lines = run_probe(tmp_path)
    assert lines[0] == str(package / "wire" / "checksum.py")
    assert lines[1] == str(package / "core" / "tcp" / "rto.py")
    assert lines[2].startswith("pure Python (compiled build unusable); ")
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) == 1, lines
    assert "CompiledBuildWarning" in warnings[0]
    assert "rcunet.core.tcp.rto failed to load" in warnings[0]


def test_another_interpreters_extension_is_not_ours(tmp_path):
    """A file built for another interpreter (as an editable install shared by 3.11 and
    3.13t leaves beside the source) is neither loaded nor a reason to warn."""
    package = copy_package(tmp_path)
    (package / "wire" / "checksum.cpython-399-x86_64-linux-gnu.so").write_bytes(b"other")
    lines = run_probe(tmp_path)
    assert lines[0] == str(package / "wire" / "checksum.py")
    assert lines[2].startswith("pure Python (no compiled modules installed); ")
    assert not [line for line in lines if line.startswith("WARNING")]


def test_a_compiled_module_older_than_its_source_is_not_used(tmp_path):
    """An editable install edited since its last build runs the edited source."""
    package = copy_package(tmp_path)
    stale = package / "wire" / f"checksum{EXTENSION}"
    stale.write_bytes(b"\x7fELF stale")
    source = package / "wire" / "checksum.py"
    os.utime(stale, (1_000_000_000, 1_000_000_000))
    os.utime(source, (2_000_000_000, 2_000_000_000))
    lines = run_probe(tmp_path)
    assert lines[0] == str(source)
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) == 1 and "older than its source" in warnings[0], lines


def test_rcunet_pure_never_touches_a_compiled_file(tmp_path):
    """RCUNET_PURE=1: the finder loads the source even where an extension file sits
    beside it (as an editable install leaves them), and nothing is tried or warned."""
    package = copy_package(tmp_path)
    (package / "wire" / f"checksum{EXTENSION}").write_bytes(b"not even ELF")
    lines = run_probe(tmp_path, RCUNET_PURE="1")
    assert lines[0] == str(package / "wire" / "checksum.py")
    assert lines[2].startswith("pure Python (RCUNET_PURE=1); ")
    assert not [line for line in lines if line.startswith("WARNING")]


def test_rcunet_pure_zero_means_not_forced(monkeypatch):
    for value, forced in (("1", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv(build.PURE_ENV, value)
        assert build.pure_forced() is forced


def test_version_names_the_build_and_the_interpreter():
    done = subprocess.run([sys.executable, "-m", "rcunet.cli", "--version"],
                          capture_output=True, text=True, timeout=120, check=True)
    line = done.stdout.strip()
    assert line.startswith(f"rcunet {rcunet.__version__}: ")
    assert ("compiled (mypyc, " in line) or ("pure Python (" in line)
    assert f"CPython {sys.version.split()[0]}" in line


def test_running_build_matches_the_modules_loaded():
    current = build.current()
    import rcunet.core.tcp.rto as rto

    compiled_file = rto.__file__ is not None and rto.__file__.endswith(EXTENSION)
    assert current.compiled == compiled_file
    if current.compiled:
        assert "rcunet.core.tcp.rto" in current.modules


def _setup_compiled_list() -> list[str]:
    namespace: dict[str, object] = {}
    text = (REPO / "setup.py").read_text(encoding="utf-8")
    start = text.index("COMPILED = [")
    exec(text[start:text.index("]", start) + 1], namespace)  # the list literal alone
    return list(namespace["COMPILED"])  # type: ignore[call-overload]


@pytest.mark.skipif(not (REPO / "setup.py").exists(), reason="installed without its setup.py")
def test_every_compiled_module_exists_and_is_type_checked_strictly():
    """mypyc compiles what mypy checks: each listed module must be under a strict mypy
    override in pyproject.toml (or mypyc would build what mypy never verified)."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    strict = [override["module"] for override in config["tool"]["mypy"]["overrides"]
              if override.get("strict")]
    patterns = [p for entry in strict for p in ([entry] if isinstance(entry, str) else entry)]
    for path in _setup_compiled_list():
        assert (PACKAGE.parent / path).is_file(), path  # in the rcunet under test
        module = path[: -len(".py")].replace("/", ".")
        assert any(module == p or (p.endswith(".*") and module.startswith(p[:-1]))
                   for p in patterns), f"{module} is compiled but not under mypy strict"


def _none_checks(function: ast.FunctionDef) -> list[tuple[int, str]]:
    """(line, attribute) of every ``obj.attr is None`` / ``is not None`` in ``function``."""
    return [(node.lineno, ast.unparse(node.left)) for node in ast.walk(function)
            if isinstance(node, ast.Compare) and isinstance(node.left, ast.Attribute)
            and any(isinstance(op, (ast.Is, ast.IsNot)) for op in node.ops)
            and any(isinstance(c, ast.Constant) and c.value is None
                    for c in node.comparators)]


def _narrowed_rereads(function: ast.FunctionDef) -> list[str]:
    """Reads, in the body of a ``with`` block (under the lock it took), of an attribute
    the function tested against None on an earlier line."""
    checks = _none_checks(function)
    found = []
    for block in ast.walk(function):
        if not isinstance(block, ast.With):
            continue
        for node in (n for statement in block.body for n in ast.walk(statement)):
            if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
                text = ast.unparse(node)
                if any(name == text and line < block.lineno for line, name in checks):
                    found.append(f"{function.name}:{node.lineno} {text}")
    return found


@pytest.mark.skipif(not (REPO / "setup.py").exists(), reason="installed without its setup.py")
def test_no_compiled_function_rereads_under_a_lock_what_it_checked_before():
    """mypy narrows ``self.x`` after ``if self.x is None: return`` for the rest of the
    function, and mypyc checks every later read against the narrowed type: a lockless
    check followed by a re-read under the lock turns another thread's store of None in
    between into a TypeError.  The locked re-read belongs in a function of its own
    (``TcpSock._claim_teardown``)."""
    offenders = []
    for path in _setup_compiled_list():
        tree = ast.parse((PACKAGE.parent / path).read_text(encoding="utf-8"))
        for function in ast.walk(tree):
            if isinstance(function, ast.FunctionDef):
                offenders += [f"{path}:{where}" for where in _narrowed_rereads(function)]
    assert not offenders


def test_the_narrowed_reread_check_finds_the_pattern():
    bad = ast.parse("def post(self):\n"
                    "    if self.teardown is None:\n"
                    "        return\n"
                    "    with self.lock:\n"
                    "        todo = self.teardown\n").body[0]
    good = ast.parse("def post(self):\n"
                     "    if self.teardown is None:\n"
                     "        return\n"
                     "    with self.lock:\n"
                     "        todo = self.claim()\n").body[0]
    assert isinstance(bad, ast.FunctionDef) and isinstance(good, ast.FunctionDef)
    assert _narrowed_rereads(bad) == ["post:5 self.teardown"]
    assert _narrowed_rereads(good) == []


def _source_tree(tmp_path: pathlib.Path) -> pathlib.Path:
    """What ``pip install .`` reads, copied (a build writes into its source tree)."""
    tree = tmp_path / "src"
    copy_package(tree)
    for name in ("pyproject.toml", "setup.py", "build_backend.py", "README.md", "MANIFEST.in"):
        shutil.copy2(REPO / name, tree / name)
    return tree


@pytest.mark.skipif(not (REPO / "setup.py").exists(), reason="installed without its setup.py")
def test_an_install_without_a_c_compiler_is_pure_python_and_says_so(tmp_path):
    """``CC=false pip install .``: setup.py finds no working compiler, installs every
    module as source with no extension file, and ``rcunet --version`` names the pure
    build.  (Without build isolation: this environment's setuptools and mypyc, so the
    compiler probe is what decides.)"""
    environ = {k: v for k, v in os.environ.items()
               if k not in (build.PURE_ENV, "RCUNET_PURE_BUILD", "PYTHONPATH")}
    environ.update(CC="false", PIP_DISABLE_PIP_VERSION_CHECK="1", PYTHONDONTWRITEBYTECODE="1")
    target = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-v", "--no-deps", "--no-build-isolation",
         "--no-index", "--target", str(target), str(_source_tree(tmp_path))],
        cwd=tmp_path, env=environ, capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert "rcunet build: the C compiler does not work" in output, output
    assert "installing pure Python" in output
    installed = target / "rcunet"
    assert (installed / "core" / "tcp" / "rto.py").is_file()
    assert not list(installed.rglob(f"*{EXTENSION}"))
    version = subprocess.run([sys.executable, "-m", "rcunet.cli", "--version"], cwd=tmp_path,
                             env={**environ, "PYTHONPATH": str(target)},
                             capture_output=True, text=True, timeout=120, check=True)
    assert "pure Python (no compiled modules installed)" in version.stdout, version.stdout
