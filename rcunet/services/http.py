"""A small HTTP/1.1 responder (RFC 9112) for interop and load tests.

Routes:
  ``GET|HEAD /``            a short text page
  ``GET|HEAD /bytes/N``     N bytes of the repeating pattern 0x00..0xff (bulk downloads;
                            the client checks them with ``pattern_sha256(N)``)
  ``POST|PUT /sha256``      the SHA-256 and length of the request body (bulk uploads)
  anything else             404; other methods 405

Persistence: HTTP/1.1 keeps the connection unless ``Connection: close``; HTTP/1.0 only
with ``Connection: keep-alive`` (what ``ab -k`` sends).  ``Expect: 100-continue`` is
answered before the body is read (curl sends it for large uploads).  Request bodies need
``Content-Length`` (411 otherwise; chunked uploads get 501).  Malformed requests get 400
and the connection is closed.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from email.utils import formatdate
from typing import Any

from rcunet.services.base import Service

MAX_HEADER_BYTES = 16384
MAX_BYTES = 1 << 31  # largest /bytes/N served
CHUNK = 65536
PATTERN_BLOCK = bytes(range(256)) * (CHUNK // 256)  # CHUNK bytes, period 256
INDEX_BODY = b"rcunet http responder\n"
REASONS = {100: "Continue", 200: "OK", 400: "Bad Request", 404: "Not Found",
           405: "Method Not Allowed", 411: "Length Required", 413: "Content Too Large",
           431: "Request Header Fields Too Large", 501: "Not Implemented"}


class BadRequest(Exception):
    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


def pattern_chunks(size: int) -> Iterator[bytes]:
    """The /bytes/N body in CHUNK-sized pieces (byte i is ``i % 256``)."""
    remaining = size
    while remaining > 0:
        piece = PATTERN_BLOCK if remaining >= CHUNK else PATTERN_BLOCK[:remaining]
        remaining -= len(piece)
        yield piece


def pattern_sha256(size: int) -> str:
    digest = hashlib.sha256()
    for piece in pattern_chunks(size):
        digest.update(piece)
    return digest.hexdigest()


class Request:
    """One parsed request head."""

    def __init__(self, method: str, target: str, version: str,
                 headers: dict[str, str]) -> None:
        self.method = method
        self.target = target
        self.version = version
        self.headers = headers  # lower-case names; repeated fields joined with ", "

    def wants_keep_alive(self) -> bool:
        tokens = {t.strip().lower() for t in self.headers.get("connection", "").split(",")}
        if self.version == "HTTP/1.1":
            return "close" not in tokens
        return "keep-alive" in tokens


def parse_head(head: bytes) -> Request:
    try:
        text = head.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        raise BadRequest(400, "undecodable request") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or parts[2] not in ("HTTP/1.0", "HTTP/1.1") or not parts[0].isalpha():
        raise BadRequest(400, f"bad request line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest(400, f"bad header line {line[:80]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return Request(parts[0], parts[1], parts[2], headers)


class Connection:
    """Buffered reading of one connection: request heads and fixed-length bodies."""

    def __init__(self, sock: Any) -> None:
        self.sock = sock
        self.buffer = bytearray()

    def read_head(self) -> bytes | None:
        """The next request head without its blank line; None on a clean EOF."""
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                head = bytes(self.buffer[:end])
                del self.buffer[: end + 4]
                return head
            if len(self.buffer) > MAX_HEADER_BYTES:
                raise BadRequest(431, "request head too large")
            data = self.sock.recv(CHUNK)
            if not data:
                if self.buffer.strip():
                    raise BadRequest(400, "connection closed inside a request head")
                return None
            self.buffer += data

    def read_body(self, length: int, digest: Any) -> int:
        """Feed ``length`` body bytes to ``digest``; returns the count read."""
        remaining = length
        if self.buffer:
            take = bytes(self.buffer[:remaining])
            del self.buffer[: len(take)]
            digest.update(take)
            remaining -= len(take)
        while remaining > 0:
            data = self.sock.recv(min(CHUNK * 4, remaining))
            if not data:
                raise BadRequest(400, "connection closed inside a request body")
            digest.update(data)
            remaining -= len(data)
        return length


def response_head(status: int, length: int, keep_alive: bool, version: str,
                  content_type: str = "text/plain") -> bytes:
    lines = [f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}",
             f"Date: {formatdate(time.time(), usegmt=True)}",
             "Server: rcunet",
             f"Content-Type: {content_type}",
             f"Content-Length: {length}"]
    if not keep_alive:
        lines.append("Connection: close")
    elif version == "HTTP/1.0":
        lines.append("Connection: keep-alive")
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


class HttpResponder(Service):
    """The HTTP service (see the module docstring for routes and persistence)."""

    name = "http"

    def serve_connection(self, conn: Any, peer: Any) -> None:
        stream = Connection(conn)
        while not self._stopping.is_set():
            try:
                head = stream.read_head()
                if head is None:
                    return
                request = parse_head(head)
                keep_alive = self._answer(stream, request)
            except BadRequest as exc:
                body = f"{exc}\n".encode()
                conn.sendall(response_head(exc.status, len(body), False, "HTTP/1.1") + body)
                return
            if not keep_alive:
                return

    def _answer(self, stream: Connection, request: Request) -> bool:
        conn = stream.sock
        keep_alive = request.wants_keep_alive()
        path = request.target.split("?", 1)[0]
        method = request.method
        if "chunked" in request.headers.get("transfer-encoding", "").lower():
            raise BadRequest(501, "chunked request bodies are not supported")
        length_text = request.headers.get("content-length", "0")
        if not length_text.isdigit():
            raise BadRequest(400, "bad Content-Length")
        length = int(length_text)
        if method in ("POST", "PUT"):
            if "content-length" not in request.headers:
                raise BadRequest(411, "a body needs Content-Length")
            if path != "/sha256":
                stream.read_body(length, hashlib.sha256())
                return self._send(conn, 404, b"not found\n", keep_alive, request)
            if request.headers.get("expect", "").lower() == "100-continue":
                conn.sendall(b"HTTP/1.1 100 Continue\r\n\r\n")
            digest = hashlib.sha256()
            stream.read_body(length, digest)
            body = f"{digest.hexdigest()} {length}\n".encode()
            return self._send(conn, 200, body, keep_alive, request)
        if length:
            stream.read_body(length, hashlib.sha256())  # a GET with a body: skip it
        if method not in ("GET", "HEAD"):
            return self._send(conn, 405, b"method not allowed\n", keep_alive, request)
        if path == "/":
            return self._send(conn, 200, INDEX_BODY, keep_alive, request)
        if path.startswith("/bytes/") and path[7:].isdigit() and int(path[7:]) <= MAX_BYTES:
            size = int(path[7:])
            conn.sendall(response_head(200, size, keep_alive, request.version,
                                       "application/octet-stream"))
            if method == "GET":
                for piece in pattern_chunks(size):
                    conn.sendall(piece)
            return keep_alive
        return self._send(conn, 404, b"not found\n", keep_alive, request)

    @staticmethod
    def _send(conn: Any, status: int, body: bytes, keep_alive: bool, request: Request) -> bool:
        head = response_head(status, len(body), keep_alive, request.version)
        conn.sendall(head if request.method == "HEAD" else head + body)
        return keep_alive
