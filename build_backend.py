"""setuptools' build backend, asking for mypy (mypyc) only where setup.py will compile.

On a free-threaded interpreter setup.py installs pure Python, and mypy could not even be
installed there (its ast-serialize dependency has no 3.13t wheel and would need a Rust
build), so the build environment gets it only on GIL builds.  Everything else is
setuptools.build_meta unchanged.
"""

from __future__ import annotations

import sysconfig
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (the rest of the backend, unchanged)

COMPILER_REQUIRES = ["mypy>=1.10"]


def _compiler_requires() -> list[str]:
    return [] if sysconfig.get_config_var("Py_GIL_DISABLED") else list(COMPILER_REQUIRES)


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    return _setuptools.get_requires_for_build_wheel(config_settings) + _compiler_requires()


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None
                                    ) -> list[str]:
    return _setuptools.get_requires_for_build_editable(config_settings) + _compiler_requires()
