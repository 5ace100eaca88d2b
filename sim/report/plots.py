"""The report's figures: one matplotlib ``Figure`` per plot, drawn from ``series``.

Responsibility: draw, nothing else (the numbers come from ``sim.report.series``). Figures
are built with ``matplotlib.figure.Figure`` (no pyplot, no display, the Agg canvas), so
importing this module is cheap and rendering needs no GUI; matplotlib itself is imported
only when a figure is drawn. ``PLOTS`` lists every plot of a run report with its file name
and the sentence that says how to read it (report.html and docs/reports.md show it).

Invariant: every plot function returns a Figure (with a "nothing to show" note when the
run has no data for it), so a report always has the same files; the first line or layer of
each axes is the series ``sim.report.series`` computed, unchanged.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sim.report import series

FIGSIZE = (7.0, 3.2)
DPI = 72
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
          "#8c8c8c", "#ccb974", "#64b5cd")  # fmt: skip


def new_figure(figsize: tuple[float, float] = FIGSIZE):
    """A Figure on the Agg canvas (no pyplot: nothing global, nothing displayed)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI)
    # fixed margins: a layout engine costs more than the drawing itself
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.15, top=0.9)
    return fig


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def plot_memory(run) -> Any:
    """Memory over time, stacked by use (GB)."""
    from sim.report.data import load_run

    run = load_run(run)
    st = series.memory_stack(run.memory)
    fig = new_figure()
    ax = fig.add_subplot()
    if not len(st.t_s):
        _empty(ax, "no memory records")
        return fig
    ax.stackplot(st.t_s, *st.layers.values(), labels=list(st.layers), step="post",
                 colors=COLORS[: len(st.layers)], alpha=0.85)  # fmt: skip
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("GB")
    ax.set_title("KV memory by use")
    ax.legend(loc="upper left", fontsize=7, ncols=2)
    return fig


def plot_efficiency(run) -> Any:
    """Allocation efficiency and external fragmentation over time."""
    from sim.report.data import load_run

    run = load_run(run)
    eff = series.efficiency(run.memory)
    fig = new_figure()
    ax = fig.add_subplot()
    if not len(eff["t_s"]):
        _empty(ax, "no memory records")
        return fig
    for i, (name, values) in enumerate((k, v) for k, v in eff.items() if k != "t_s"):
        ax.step(eff["t_s"], values, where="post", label=name, color=COLORS[i], lw=1)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("fraction")
    ax.set_title("allocation efficiency and external fragmentation")
    ax.legend(loc="lower right", fontsize=7)
    return fig


def plot_latency_cdf(run) -> Any:
    """CDFs of TTFT, ITL and resume latency (log time axis)."""
    from sim.report.data import load_run

    run = load_run(run)
    cdfs = series.latency_cdfs(run)
    fig = new_figure()
    ax = fig.add_subplot()
    if not cdfs:
        _empty(ax, "no latencies")
        return fig
    for i, (name, (x, y)) in enumerate(cdfs.items()):
        ax.step(x, y, where="post", label=name, color=COLORS[i], lw=1.2)
    if all(x.min() > 0 for x, _ in cdfs.values()):
        ax.set_xscale("log")
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("seconds")
    ax.set_ylabel("fraction <= x")
    ax.set_title("latency CDFs")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=7)
    return fig


def plot_pauses(run) -> Any:
    """Pause decisions (bars) split by outcome (stacked)."""
    from sim.report.data import load_run

    run = load_run(run)
    counts = series.pause_counts(run.pauses)
    fig = new_figure()
    ax = fig.add_subplot()
    if counts.empty:
        _empty(ax, "no tool pauses in this run")
        return fig
    x = np.arange(len(counts.index))
    bottom = np.zeros(len(x))
    for i, outcome in enumerate(counts.columns):
        h = counts[outcome].to_numpy(float)
        ax.bar(x, h, bottom=bottom, label=str(outcome), color=COLORS[i % len(COLORS)])
        bottom += h
    ax.set_xticks(x, [str(d) for d in counts.index])
    ax.set_ylabel("pauses")
    ax.set_title("pause decisions and outcomes")
    ax.legend(fontsize=7, title="outcome", title_fontsize=7)
    return fig


def plot_prefix(run) -> Any:
    """Prefix hit rate of each trajectory against its start time."""
    from sim.report.data import load_run

    run = load_run(run)
    t, rate = series.prefix_hit_by_trajectory(run.trajectories)
    fig = new_figure()
    ax = fig.add_subplot()
    if not len(t):
        _empty(ax, "no prefix lookups")
        return fig
    ax.plot(t, rate, ".", ms=3, color=COLORS[0])
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("trajectory start (simulated s)")
    ax.set_ylabel("hit tokens / looked up")
    ax.set_title("prefix hit rate per trajectory")
    return fig


def plot_batch(run) -> Any:
    """Prefill and decode tokens per step over time (stacked)."""
    from sim.report.data import load_run

    run = load_run(run)
    b = series.batch_composition(run.steps)
    fig = new_figure()
    ax = fig.add_subplot()
    if not len(b["t_s"]):
        _empty(ax, "no engine steps")
        return fig
    ax.stackplot(b["t_s"], b["decode"], b["prefill"], labels=["decode", "prefill"],
                 step="post", colors=COLORS[:2], alpha=0.85)  # fmt: skip
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("tokens per step")
    ax.set_title("batch composition")
    ax.legend(loc="upper right", fontsize=7)
    return fig


@dataclass(frozen=True)
class Plot:
    """One plot of a run report."""

    file: str  # PNG name in the run folder
    title: str
    draw: Callable[[Any], Any]
    how_to_read: str  # one sentence (report.html and docs/reports.md)


PLOTS: tuple[Plot, ...] = (
    Plot("plot_memory.png", "Memory over time", plot_memory,
         "The KV pool stacked by use at each moment: the token states at the bottom are the "
         "useful part; whatever sits above them (held but not token states, prefix cache, "
         "free) is memory that serves no token now."),
    Plot("plot_efficiency.png", "Allocation efficiency and fragmentation", plot_efficiency,
         "eta_alloc is the share of allocated memory holding token states, eta_effective the "
         "share of the whole pool; phi_ext (when recorded) is the share of free memory too "
         "scattered to fit a request, so high phi_ext with free memory left means "
         "fragmentation, not capacity, is refusing work."),
    Plot("plot_latency.png", "Latency CDFs", plot_latency_cdf,
         "Each curve gives the fraction of samples at or below a latency: read the p99 where "
         "a curve crosses 0.99, and a long flat tail as rare slow requests."),
    Plot("plot_pauses.png", "Pause decisions and outcomes", plot_pauses,
         "One bar per pause-policy decision, split by how those pauses ended: a tall "
         "recomputed or reloaded share under a hold-like decision means the policy was "
         "overruled by memory pressure."),
    Plot("plot_prefix.png", "Prefix hit rate per trajectory", plot_prefix,
         "One dot per trajectory at its start time: dots low at the start and high later "
         "show a cache warming up; dots that stay low show prompts that break reuse."),
    Plot("plot_batch.png", "Batch composition", plot_batch,
         "Mean prefill and decode tokens per engine step over time: prefill spikes are "
         "arrivals being absorbed, a flat decode band is steady generation."),
)  # fmt: skip


def figure_png(fig) -> bytes:
    """The figure as PNG bytes (no software tag, so the bytes carry no URL)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()
