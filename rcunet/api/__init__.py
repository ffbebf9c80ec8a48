"""The user-facing socket API, compatible with Python's ``socket`` module."""

from rcunet.api.socket import Socket
from rcunet.host.host import register_socket_factory

register_socket_factory(Socket)  # Host.socket() makes these (the host never imports us)
