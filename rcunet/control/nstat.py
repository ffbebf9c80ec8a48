"""iproute2 ``nstat`` layout: ``#kernel`` then ``%-32s%-16llu%6.1f`` per counter.

Without ``-a`` nstat prints what changed since its last run, from a history file it
keeps per user (ours: per user and control socket); ``-a`` prints absolute values and
``-z`` includes counters that are zero.  rcunet keeps no rate estimator, so the rate
column is 0.0 as nstat's is without its daemon.
"""

from __future__ import annotations

import json
import os


def history_path(control_path: str) -> str:
    name = os.path.basename(control_path).replace(".sock", "")
    return os.path.join("/tmp", f".rcunet-nstat.u{os.getuid()}.{name}")


def load_history(path: str) -> dict[str, int]:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, int)} if isinstance(data, dict) \
        else {}


def save_history(path: str, values: dict[str, int]) -> None:
    tmp = f"{path}.{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(values, fh)
    os.replace(tmp, path)


def render(values: dict[str, int], history: dict[str, int] | None, zeros: bool) -> str:
    lines = ["#kernel"]
    for name in sorted(values):
        value = values[name] - (history or {}).get(name, 0)
        if value or zeros:
            lines.append(f"{name:<32}{value:<16}{0.0:6.1f}")
    return "\n".join(lines)
