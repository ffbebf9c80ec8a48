"""The three ways a script ends other than passing."""

from __future__ import annotations


class DrillError(Exception):
    """The script itself is wrong: a syntax error or an impossible value (with its line)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


class DrillUnsupported(DrillError):
    """The script needs something the engine does not provide (named in the message)."""


class DrillFailure(Exception):
    """The stack did not do what the script expected: the evidence, packetdrill-style."""

    def __init__(self, line: int, message: str, at_usecs: int | None = None) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message
        self.at_usecs = at_usecs
