"""The figures of a comparison: key metrics per variant, TTFT CDFs, where the pool went.

Responsibility: draw ``compare.html``'s PNGs and the notebook helper ``plot_compare``
from variant rows (``sim.report.variant_rows.variant_row``) and runs; the pool view is the
allocator study of the vLLM paper (Kwon et al. 2023, Fig. 2): per variant, the
time-averaged share of the KV pool holding token states, reserved for future tokens,
lost to internal and to external fragmentation (``sim.report.pool``).

Invariant: draws only (numbers come from the rows and ``series``); every function
returns a Figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.report import series
from sim.report.plots import COLORS, _empty, new_figure
from sim.report.pool import SHARES
from sim.report.variant_rows import compare_frame, variant_row

#: the bars of the key-metrics figure: (title, row key, scale)
KEY_METRICS = (
    ("TTFT p99 (ms)", "ttft_s.p99", 1e3),
    ("ITL p99 (ms)", "itl_s.p99", 1e3),
    ("output tokens/s", "output_tokens_per_s", 1.0),
    ("eta_alloc mean (%)", "eta_alloc_mean", 100.0),
    ("preemptions", "preemptions", 1.0),
    ("prefix hit rate (%)", "prefix_hit_rate", 100.0),
)
POOL_LABELS = {"token_states": "token states", "reserved": "reserved (future tokens)",
               "internal": "internal fragmentation", "external": "external frag. & others",
               "cached": "prefix cache"}  # fmt: skip


def _rows(named_runs, frame):
    if frame is None:
        frame = compare_frame([variant_row(n, rs) for n, rs in named_runs.items()])
    return frame


def plot_metrics(named_runs: dict, frame=None) -> Any:
    """One small bar chart per key metric, a bar per variant."""
    frame = _rows(named_runs, frame)
    names = list(frame.variant)
    fig = new_figure((9.0, 4.8))
    fig.subplots_adjust(left=0.06, right=0.99, bottom=0.2, top=0.92, wspace=0.35, hspace=0.6)
    x = np.arange(len(names))
    for i, (title, key, scale) in enumerate(KEY_METRICS):
        ax = fig.add_subplot(2, 3, i + 1)
        vals = frame[key].to_numpy(float) * scale if key in frame else np.full(len(x), np.nan)
        ax.bar(x, np.nan_to_num(vals), color=[COLORS[j % len(COLORS)] for j in range(len(x))])
        ax.set_title(title, fontsize=8)
        ax.set_xticks(x, [str(j + 1) for j in range(len(x))], fontsize=7)
        ax.tick_params(labelsize=7)
    fig.text(0.01, 0.02, "  ".join(f"{j + 1}: {n}" for j, n in enumerate(names))[:220], fontsize=7)
    return fig


def plot_ttft(named_runs: dict, frame=None) -> Any:
    """TTFT CDF of every variant (first replication)."""
    fig = new_figure()
    ax = fig.add_subplot()
    drawn = 0
    for i, (name, runs) in enumerate(named_runs.items()):
        if not runs or not len(runs[0].requests):
            continue
        x, y = series.cdf(runs[0].requests.ttft_s)
        if len(x):
            ax.step(x, y, where="post", label=name, color=COLORS[i % len(COLORS)], lw=1.2)
            drawn += 1
    if not drawn:
        _empty(ax, "no TTFT samples")
        return fig
    ax.set_xscale("log")
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("TTFT (s)")
    ax.set_ylabel("fraction <= x")
    ax.set_title("TTFT CDF by variant")
    ax.legend(fontsize=7, loc="lower right")
    return fig


def plot_pool(named_runs: dict, frame=None) -> Any:
    """The allocator-study view: time-averaged shares of the KV pool, one stacked bar per
    variant, the token-state share printed on its bar."""
    frame = _rows(named_runs, frame)
    names = list(frame.variant)
    fig = new_figure((max(6.0, 1.5 * len(names) + 3.5), 3.6))
    fig.subplots_adjust(left=0.08, right=0.7, bottom=0.22, top=0.9)
    ax = fig.add_subplot()
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    for i, share in enumerate(SHARES):
        key = f"pool_{share}"
        h = np.nan_to_num(frame[key].to_numpy(float) * 100) if key in frame else np.zeros(len(x))
        ax.bar(x, h, bottom=bottom, label=POOL_LABELS[share], color=COLORS[i])
        bottom += h
    if "pool_token_states" in frame:
        for j, v in enumerate(frame.pool_token_states.to_numpy(float) * 100):
            if not np.isnan(v):
                ax.text(j, v / 2, f"{v:.1f}%", ha="center", va="center", fontsize=8, color="white")
    ax.set_xticks(x, names, fontsize=7, rotation=15)
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of the KV pool (time-averaged)")
    ax.set_title("where the KV pool went")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@dataclass(frozen=True)
class ComparePlot:
    file: str
    title: str
    draw: Callable[..., Any]
    how_to_read: str


COMPARE_PLOTS = (
    ComparePlot("compare_metrics.png", "Key metrics by variant", plot_metrics,
                "One panel per metric, one bar per variant (numbered as under the panels): "
                "compare heights within a panel; the table above gives the deltas."),
    ComparePlot("compare_ttft.png", "TTFT CDFs", plot_ttft,
                "A curve further left reaches a given fraction of requests sooner; where "
                "curves cross, one variant wins at the median and loses in the tail."),
    ComparePlot("compare_pool.png", "Where the KV pool went (allocator study)", plot_pool,
                "Each bar is the KV pool averaged over the memory-bound time: the bottom "
                "segment is token states (the useful share, as in the vLLM paper's Fig. 2), "
                "the rest is memory reserved, fragmented or free while requests wait."),
)  # fmt: skip


def plot_compare(runs, frame=None, kind: str = "pool") -> Any:
    """A comparison figure for notebooks: ``runs`` is a dict {name: run or [runs]} or a
    list of runs/run folders (named by scenario and position); ``kind`` is ``pool``,
    ``metrics`` or ``ttft``."""
    from sim.report.data import load_run

    if not isinstance(runs, dict):
        runs = {f"{i + 1}: {load_run(r).name}": r for i, r in enumerate(runs)}
    named = {n: [load_run(x) for x in (r if isinstance(r, list) else [r])] for n, r in runs.items()}
    draw = {"pool": plot_pool, "metrics": plot_metrics, "ttft": plot_ttft}.get(kind)
    if draw is None:
        raise ValueError(f"kind must be pool, metrics or ttft; got {kind!r}")
    return draw(named, frame)
