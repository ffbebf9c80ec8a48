"""rcunet: a userspace TCP/IP stack whose socket layer is built like the fastest kernels'."""

__version__ = "0.2.0"

# The compiled modules, or the source of every one (RCUNET_PURE=1, or a compiled module
# that cannot load): chosen once, here, before any other rcunet module is imported.
from rcunet import build as _build  # noqa: E402

_build.select()


def __getattr__(name: str) -> object:
    # ``rcunet.patched(host)`` without importing the socket layer for every ``import rcunet``;
    # by name, so that type-checking rcunet/wire (strict, on its own) does not pull the
    # whole stack in through this package's __init__.
    if name == "patched":
        import importlib

        return importlib.import_module("rcunet.api.patch").patched
    raise AttributeError(f"module 'rcunet' has no attribute {name!r}")
