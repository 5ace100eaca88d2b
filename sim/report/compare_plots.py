"""The figures of a comparison: key metrics per variant, TTFT CDFs, where the pool went.

Responsibility: draw ``compare.html``'s PNGs and the notebook helper ``plot_compare``
from variant rows (``sim.report.variant_rows.variant_row``) and runs; the pool view is the
allocator study of the vLLM paper (Kwon et al. 2023, Fig. 2): per variant, the
time-averaged share of the KV pool holding token states, reserved for future tokens,
lost to internal and to external fragmentation, and free (``sim.report.pool``: the
paper's "external fragmentation & others" split into real fragmentation and free memory).

Readable at report size: the variants are named on the axes (wrapped, never numbered), a
metric every variant reports as 0 (or not at all) says so instead of drawing an empty
axis, each bar carries its value, and legends stand outside the data.

Invariant: draws only (numbers come from the rows, ``series`` and ``pool``); every
function returns a Figure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.report import series
from sim.report.plots import COLORS, _empty, _legend_outside, _log_ticks, new_figure
from sim.report.pool import SHARES, external_parts
from sim.report.variant_rows import _busy, compare_frame, table_window, variant_row

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
               "internal": "internal fragmentation", "external": "external frag. & free",
               "external_fragmentation": "external fragmentation", "free": "free (unallocated)",
               "cached": "prefix cache"}  # fmt: skip
#: the pool figure's layers, bottom first: ``external`` drawn as its two parts
POOL_LAYERS = ("token_states", "reserved", "internal", "external_fragmentation", "free",
               "cached")  # fmt: skip
#: the pool figure's window (``table_window``), as its title says
POOL_WINDOW_LABEL = {"busy": "the time requests waited (every variant)",
                     "run": "the whole run (every variant)"}  # fmt: skip
#: a variant name wraps at this many characters on an axis
NAME_WRAP = 30


def _wrap(name: str) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(name, NAME_WRAP, break_on_hyphens=False,
                                   break_long_words=True)) or name  # fmt: skip


def _rows(named_runs, frame):
    if frame is None:
        frame = compare_frame([variant_row(n, rs) for n, rs in named_runs.items()])
    return frame


def plot_metrics(named_runs: dict, frame=None) -> Any:
    """One small horizontal bar chart per key metric, a bar per variant, the variants
    named on the shared vertical axis and each bar's value at its end; a metric that every
    variant reports as 0 (or none reports) is a note, not an empty axis."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    frame = _rows(named_runs, frame)
    names = [_wrap(str(n)) for n in frame.variant]
    lines = max(n.count("\n") + 1 for n in names) if names else 1
    height = max(4.0, 0.62 + 2 * (0.3 + len(names) * (0.16 + 0.1 * lines)) + 0.9)
    fig = new_figure((11.0, height))
    left = min(0.32, 0.03 + 0.0072 * max((len(r) for n in names for r in n.split("\n")), default=4))
    fig.subplots_adjust(left=left, right=0.97, bottom=0.07, top=0.9, wspace=0.45, hspace=0.5)
    y = np.arange(len(names))
    for i, (title, key, scale) in enumerate(KEY_METRICS):
        ax = fig.add_subplot(2, 3, i + 1)
        vals = frame[key].to_numpy(float) * scale if key in frame else np.full(len(y), np.nan)
        ax.set_title(title, fontsize=8)
        if np.all(np.isnan(vals)) or np.all(np.nan_to_num(vals) == 0):
            _empty(ax, "not reported" if np.all(np.isnan(vals)) else "all variants 0")
            continue
        bars = ax.barh(y, np.nan_to_num(vals), color=[COLORS[j % len(COLORS)] for j in range(len(y))])
        ax.bar_label(bars, [_number(v) for v in vals], fontsize=6, padding=2)
        ax.set_xlim(0, np.nanmax(np.abs(vals)) * 1.45)  # room for the labels
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))  # ticks that never crowd
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:,.0f}" if abs(x) >= 1e3 else f"{x:g}"))
        ax.set_yticks(y, names if i % 3 == 0 else [""] * len(y), fontsize=7)
        ax.invert_yaxis()  # the first variant on top, as in the table
        ax.tick_params(axis="x", labelsize=7)
    fig.suptitle("key metrics by variant", fontsize=9)
    return fig


def _number(x: float) -> str:
    """A bar's value: 4 significant digits, whole numbers from 10,000 up (as the table)."""
    if np.isnan(x):
        return "n/a"
    return f"{x:,.0f}" if abs(x) >= 1e4 else f"{x:,.4g}"


def plot_ttft(named_runs: dict, frame=None) -> Any:
    """TTFT CDF of every variant (first replication)."""
    fig = new_figure()
    ax = fig.add_subplot()
    drawn, lo, hi = 0, np.inf, 0.0
    for i, (name, runs) in enumerate(named_runs.items()):
        if not runs or not len(runs[0].requests):
            continue
        x, y = series.cdf(runs[0].requests.ttft_s)
        if len(x):
            ax.step(x, y, where="post", label=_wrap(str(name)), color=COLORS[i % len(COLORS)],
                    lw=1.2)  # fmt: skip
            lo, hi = min(lo, x[x > 0].min(initial=np.inf)), max(hi, x.max())
            drawn += 1
    if not drawn:
        _empty(ax, "no TTFT samples")
        return fig
    ax.set_xscale("log")
    if np.isfinite(lo):
        _log_ticks(ax.xaxis, lo, hi)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("TTFT (s, log scale)")
    ax.set_ylabel("fraction <= x")
    ax.set_title("TTFT CDF by variant")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return fig


def _pool_layers(named_runs: dict, frame) -> dict[str, np.ndarray]:
    """Each layer of the pool figure (% of the pool), one value per variant, over the
    table's window (``variant_rows.table_window``: the same for every variant), with
    ``external`` as its two parts; an older frame (no windowed columns): its
    ``pool_<share>`` with ``external`` split by ``pool.external_parts`` over the variant's
    runs (the mean over replications), or whole without runs."""
    n = len(frame)
    window = table_window(frame)
    if window is not None:
        return {k: np.nan_to_num(frame[f"pool_{window}_{k}"].to_numpy(float) * 100)
                if f"pool_{window}_{k}" in frame else np.zeros(n) for k in POOL_LAYERS}  # fmt: skip
    layers = {s: (np.nan_to_num(frame[f"pool_{s}"].to_numpy(float) * 100) if f"pool_{s}" in frame
                  else np.zeros(n)) for s in SHARES}  # fmt: skip
    runs = [named_runs.get(v) or [] for v in frame.variant]
    if not all(runs):
        return layers
    frag = np.array([np.nanmean([external_parts(r, busy_only=_busy(r))["external_fragmentation"]
                                 for r in rs]) for rs in runs]) * 100  # fmt: skip
    external = layers.pop("external")
    frag = np.minimum(np.nan_to_num(frag), external)
    out = {}
    for k in POOL_LAYERS:
        out[k] = frag if k == "external_fragmentation" else external - frag if k == "free" else layers[k]
    return out


def plot_pool(named_runs: dict, frame=None) -> Any:
    """The allocator-study view: time-averaged shares of the KV pool, one stacked bar per
    variant (named under it), the token-state share printed on its bar; free memory apart
    from real external fragmentation; the legend above the bars, across the canvas."""
    frame = _rows(named_runs, frame)
    names = [_wrap(str(n)) for n in frame.variant]
    layers = _pool_layers(named_runs, frame)
    fig = new_figure((max(8.0, 1.5 * len(names) + 2.0), 4.2))
    lines = max(n.count("\n") + 1 for n in names) if names else 1
    fig.subplots_adjust(left=0.08, right=0.98, bottom=0.04 + 0.04 * lines, top=0.8)
    ax = fig.add_subplot()
    x = np.arange(len(names))
    bottom = np.zeros(len(names))
    for i, (share, h) in enumerate(layers.items()):
        ax.bar(x, h, bottom=bottom, label=POOL_LABELS[share], color=COLORS[i], width=0.6)
        bottom += h
    window = table_window(frame)
    states = "pool_token_states" if window is None else f"pool_{window}_token_states"
    if states in frame:
        for j, v in enumerate(frame[states].to_numpy(float) * 100):
            if not np.isnan(v):  # inside a bar tall enough for it, else just above it
                inside = v >= 8
                ax.text(j, v / 2 if inside else v + 1, f"{v:.1f}%", ha="center",
                        va="center" if inside else "bottom", fontsize=8,
                        color="white" if inside else "black")  # fmt: skip
    ax.set_xticks(x, names, fontsize=7)
    ax.set_ylim(0, 100)
    ax.set_ylabel("% of the KV pool (time-averaged)")
    title = "where the KV pool went" + ("" if window is None else
                                        f", averaged over {POOL_WINDOW_LABEL[window]}")
    fig.suptitle(title, fontsize=10, y=0.985)
    fig.legend(*ax.get_legend_handles_labels(), loc="upper center", bbox_to_anchor=(0.5, 0.95),
               ncols=3, fontsize=7, frameon=False)  # fmt: skip
    return fig


@dataclass(frozen=True)
class ComparePlot:
    file: str
    title: str
    draw: Callable[..., Any]
    how_to_read: str


COMPARE_PLOTS = (
    ComparePlot("compare_metrics.png", "Key metrics by variant", plot_metrics,
                "One panel per metric, one bar per variant (named on the left, its value at "
                "the bar's end): compare lengths within a panel; the table above gives the "
                "deltas."),
    ComparePlot("compare_ttft.png", "TTFT CDFs", plot_ttft,
                "A curve further left reaches a given fraction of requests sooner; where "
                "curves cross, one variant wins at the median and loses in the tail."),
    ComparePlot("compare_pool.png", "Where the KV pool went (allocator study)", plot_pool,
                "Each bar is the KV pool averaged over one window for every variant (its "
                "title says which): the time requests wait for memory when every variant had "
                "requests wait, else the whole run. The bottom segment is token states (the "
                "useful share, as in the vLLM paper's Fig. 2), above it memory reserved for "
                "future tokens, internal and external fragmentation (holes too small to use, "
                "a buddy block's rounding), then free memory (idle: no request asked for it) "
                "and prefix-cache blocks."),
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
