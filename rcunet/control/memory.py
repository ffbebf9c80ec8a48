"""Allocation diffs of a running Host, for finding what grows (the soak's tool).

Off unless ``rcunet up`` starts with ``RCUNET_TRACEMALLOC=N`` in its environment
(tracemalloc keeps N frames per allocation; it slows the daemon and costs memory of its
own, so it is a diagnosis switch, never a default).  The control socket's ``tracemalloc``
request then takes a snapshot and answers the allocation sites whose live size changed
most since the previous request (the first answers against the snapshot taken at start)
and the sites holding the most now, grouped by source line, tracemalloc's own frames
left out::

    RCUNET_TRACEMALLOC=1 rcunet up --tap tap0 ...   # later, between load rounds:
    rcunet up --control ... ; printf 'tracemalloc\\n' | socat - UNIX:/run/rcunet/tap0.sock
"""

from __future__ import annotations

import os
import threading
import tracemalloc
from typing import Any

ENV = "RCUNET_TRACEMALLOC"
TOP = 25
MAX_FRAMES = 64


class MemoryTracer:
    """The previous snapshot, and the diff against it on request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._previous: tracemalloc.Snapshot | None = None

    @staticmethod
    def frames_from_env(environ: Any = os.environ) -> int:
        """The frame count ``RCUNET_TRACEMALLOC`` asks for; 0 when unset; ValueError
        when it is not a number in 1..MAX_FRAMES."""
        text = environ.get(ENV, "")
        if not text:
            return 0
        if not text.isdigit() or not 1 <= int(text) <= MAX_FRAMES:
            raise ValueError(f"{ENV}={text!r}: expected a frame count 1..{MAX_FRAMES}")
        return int(text)

    def start(self, frames: int) -> None:
        if not tracemalloc.is_tracing():
            tracemalloc.start(frames)
        with self._lock:
            self._previous = self._snapshot()

    @staticmethod
    def _snapshot() -> tracemalloc.Snapshot:
        return tracemalloc.take_snapshot().filter_traces(
            (tracemalloc.Filter(False, tracemalloc.__file__),
             tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
             tracemalloc.Filter(False, "<unknown>")))

    def diff(self, top: int = TOP) -> dict[str, Any] | None:
        """The ``top`` sites by size change since the last call (``top``) and by live size
    now (``live``), or None when off."""
        if not tracemalloc.is_tracing():
            return None
        with self._lock:
            current = self._snapshot()
            previous, self._previous = self._previous, current
        traced, peak = tracemalloc.get_traced_memory()
        stats = current.compare_to(previous, "lineno") if previous else \
            current.statistics("lineno")
        rows = []
        for stat in stats[:top]:
            frame = stat.traceback[0]
            rows.append({"site": f"{frame.filename}:{frame.lineno}", "size": stat.size,
                         "size_diff": getattr(stat, "size_diff", stat.size),
                         "count": stat.count,
                         "count_diff": getattr(stat, "count_diff", stat.count)})
        live = [{"site": f"{s.traceback[0].filename}:{s.traceback[0].lineno}",
                 "size": s.size, "count": s.count}
                for s in current.statistics("lineno")[:top]]
        return {"traced": traced, "peak": peak, "top": rows, "live": live}
