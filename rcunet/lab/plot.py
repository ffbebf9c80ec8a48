"""Plots for the seed lab: legacy/modern bars per metric, and rates as -T grows.

matplotlib is imported only when a plot is asked for, with the Agg backend (files only, no
display needed).  Install it with ``pip install matplotlib`` (the test extra has it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rcunet.lab.report import format_change

LEGACY_COLOUR = "#c0504d"
MODERN_COLOUR = "#4f81bd"
PUBLISHED_COLOUR = "#9bbb59"


@dataclass(frozen=True)
class Metric:
    """One before/after pair to draw as two bars."""

    label: str
    legacy: float
    modern: float
    unit: str = ""


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise SystemExit("plots need matplotlib: pip install matplotlib") from exc
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def before_after_bars(path: str, title: str, metrics: Sequence[Metric]) -> str:
    """One panel per metric, legacy and modern bars with the % change on top."""
    if not metrics:
        raise ValueError("before_after_bars needs at least one metric")
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(metrics), figsize=(3.2 * len(metrics) + 0.6, 3.6),
                             squeeze=False)
    for ax, metric in zip(axes[0], metrics, strict=True):
        values = [metric.legacy, metric.modern]
        bars = ax.bar(["legacy", "modern"], values, color=[LEGACY_COLOUR, MODERN_COLOUR])
        ax.set_title(metric.label, fontsize=9)
        if metric.unit:
            ax.set_ylabel(metric.unit, fontsize=8)
        ax.tick_params(labelsize=8)
        top = max(values) or 1.0
        ax.set_ylim(0, top * 1.22)
        ax.text(bars[1].get_x() + bars[1].get_width() / 2, metric.modern + top * 0.04,
                format_change(metric.legacy, metric.modern), ha="center", fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def scaling(path: str, title: str, series: Mapping[int, Mapping[str, float]], *,
            xlabel: str = "-T (threads)", ylabel: str = "rate") -> str:
    """Legacy and modern rates against the thread count: ``series[T] = {mode: rate}``."""
    if not series:
        raise ValueError("scaling needs at least one point")
    plt = _pyplot()
    xs = sorted(series)
    fig, ax = plt.subplots(figsize=(5.0, 3.6))
    for mode, colour in (("legacy", LEGACY_COLOUR), ("modern", MODERN_COLOUR)):
        ax.plot(xs, [series[x][mode] for x in xs], marker="o", color=colour, label=mode)
    ax.set_xticks(xs)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def speedups(path: str, title: str,
             rows: Sequence[tuple[str, float | None, float | None]]) -> str:
    """Per seed, the % change measured here beside the one its authors published
    (``rows``: label, ours or None when not run, published or None when they gave none)."""
    if not rows:
        raise ValueError("speedups needs at least one row")
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(1.3 * len(rows) + 2.5, 3.8))
    width = 0.38
    ours_labelled = published_labelled = False
    for index, (_label, ours, published) in enumerate(rows):
        if ours is not None:
            ax.bar(index - width / 2, ours, width, color=MODERN_COLOUR,
                   label=None if ours_labelled else "this lab")
            ours_labelled = True
        else:
            ax.text(index - width / 2, 0, "not run", rotation=90, ha="center", va="bottom",
                    fontsize=7)
        if published is not None:
            ax.bar(index + width / 2, published, width, color=PUBLISHED_COLOUR,
                   label=None if published_labelled else "published")
            published_labelled = True
        else:
            ax.text(index + width / 2, 0, "no figure", rotation=90, ha="center",
                    va="bottom", fontsize=7)
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), [r[0] for r in rows])
    ax.set_ylabel("modern vs legacy, % change")
    ax.legend(fontsize=8)
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
