"""The client side of the control socket: one request line, one answer."""

from __future__ import annotations

import glob
import json
import os
import socket
from typing import Any

RUN_DIR = "/run/rcunet"
TIMEOUT = 10.0


class ControlClientError(Exception):
    """Ready to print as one line."""


def default_path(device: str) -> str:
    return os.path.join(RUN_DIR, f"{device}.sock")


def find_path(given: str | None) -> str:
    """``--control PATH``, or the only control socket under /run/rcunet."""
    if given:
        return given
    found = sorted(glob.glob(os.path.join(RUN_DIR, "*.sock")))
    if len(found) == 1:
        return found[0]
    if not found:
        raise ControlClientError(f"no rcunet up is running (no socket in {RUN_DIR}; "
                                 "give --control PATH)")
    raise ControlClientError(f"several rcunet up are running ({', '.join(found)}): "
                             "give --control PATH")


def request(path: str, word: str, timeout: float = TIMEOUT) -> dict[str, Any]:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(path)
            sock.sendall(word.encode() + b"\n")
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
        except PermissionError:
            raise ControlClientError(f"{path}: permission denied (root only, like "
                                     "rcunet up)") from None
        except (FileNotFoundError, ConnectionRefusedError):
            raise ControlClientError(f"{path}: no rcunet up listens there") from None
        except OSError as exc:
            raise ControlClientError(f"{path}: {exc.strerror or exc}") from None
    text = b"".join(chunks).decode("utf-8", "replace").strip()
    if text.startswith("error: "):
        raise ControlClientError(text[len("error: "):])
    try:
        answer = json.loads(text)
    except ValueError:
        raise ControlClientError(f"{path}: garbled answer") from None
    if not isinstance(answer, dict):
        raise ControlClientError(f"{path}: garbled answer")
    return answer
