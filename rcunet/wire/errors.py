"""The one error type every parser in ``rcunet.wire`` raises."""

from __future__ import annotations


class WireError(ValueError):
    """Malformed or unsupported bytes.

    ``reason`` is a short, stable, machine-friendly tag (``"truncated"``,
    ``"bad-checksum"``, ``"bad-ihl"``...) that the host layer uses as the name of
    the drop counter; ``str()`` adds the human detail.
    """

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail
