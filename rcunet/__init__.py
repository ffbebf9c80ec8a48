"""rcunet: a userspace TCP/IP stack whose socket layer is built like the fastest kernels'."""

__version__ = "0.1.0"
