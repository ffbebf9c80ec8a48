"""Helpers of the compat tests: payload hashing, a server thread on another Host, and the
asyncio echo both asyncio test modules use."""

from __future__ import annotations

import asyncio
import hashlib
import threading
from collections.abc import Callable
from typing import Any

import rcunet


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ServerThread:
    """``target(ready)`` in a thread patched to ``host``; ``ready.set(value)`` hands the
    test whatever it needs (a server object to shut down, a port)."""

    def __init__(self, host: Any, target: Callable[[Any], None]) -> None:
        self.value: Any = None
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(host, target), daemon=True)
        self._thread.start()
        assert self._ready.wait(10), "server did not start"
        if self.error is not None:
            raise self.error

    def set(self, value: Any = None) -> None:
        self.value = value
        self._ready.set()

    def _run(self, host: Any, target: Callable[[Any], None]) -> None:
        try:
            with rcunet.patched(host, this_thread=True):
                target(self)
        except BaseException as exc:  # reported by join()
            self.error = exc
            self._ready.set()

    def join(self, timeout: float = 20) -> None:
        self._thread.join(timeout)
        assert not self._thread.is_alive(), "server thread did not end"
        if self.error is not None:
            raise self.error


async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    while data := await reader.read(65536):
        writer.write(data)
        await writer.drain()
    writer.close()


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    payload: bytes) -> bytes:
    """Send ``payload`` while reading its echo; EOF ends a plain stream, the length a TLS
    one (asyncio's TLS transport cannot write_eof)."""
    tls = not writer.can_write_eof()

    async def send() -> None:
        writer.write(payload)
        await writer.drain()
        if not tls:
            writer.write_eof()

    sender = asyncio.ensure_future(send())
    echoed = await (reader.readexactly(len(payload)) if tls else reader.read(-1))
    await sender
    writer.close()
    await writer.wait_closed()
    return echoed


# Programs the `rcunet run` tests start (both runners, one process or --procs).
FETCH = """\
import hashlib, sys, urllib.request
with urllib.request.urlopen(sys.argv[1], timeout=60) as response:
    body = response.read()
print(len(body), hashlib.sha256(body).hexdigest())
"""

# The server starts beside the client: until it listens, a connect is refused.  The client
# retries on that condition alone, however long a loaded machine takes to start the server
# (the test's subprocess timeout bounds the whole run); any other error fails at once.
RETRYING_FETCH = """\
import hashlib, sys, time, urllib.error, urllib.request
while True:
    try:
        body = urllib.request.urlopen(sys.argv[1]).read()
        break
    except urllib.error.URLError as exc:
        if not isinstance(exc.reason, ConnectionRefusedError):
            raise
        time.sleep(0.05)
print(len(body), hashlib.sha256(body).hexdigest())
"""
