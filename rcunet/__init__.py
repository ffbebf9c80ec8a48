"""rcunet: a userspace TCP/IP stack whose socket layer is built like the fastest kernels'."""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # ``rcunet.patched(host)`` without importing the socket layer for every ``import rcunet``
    if name == "patched":
        from rcunet.api.patch import patched

        return patched
    raise AttributeError(f"module 'rcunet' has no attribute {name!r}")
