"""Asking a running ``rcunet up`` about itself: a UNIX control socket (``server``), the
client side (``client``) and the tools that use it, laid out as iproute2's ``ss`` and
``nstat`` and /proc/lock_stat (``ss``, ``nstat``)."""
