"""The report's figures: one matplotlib ``Figure`` per plot, drawn from ``series``.

Responsibility: draw, nothing else (the numbers come from ``sim.report.series``). Figures
are built with ``matplotlib.figure.Figure`` (no pyplot, no display, the Agg canvas), so
importing this module is cheap and rendering needs no GUI; matplotlib itself is imported
only when a figure is drawn. ``PLOTS`` lists every plot of a run report with its file name
and the sentence that says how to read it (report.html and docs/reports.md show it).

A cluster run: the time series (memory, efficiency, batch) get one small panel per node
(each node samples at its own times, so its rows are its own series), up to
``MAX_NODE_PANELS`` nodes, and beyond that one axes of the whole cluster (the sum of the
nodes' step functions, ``series.node_sum``); the latency CDFs pool every request and add
each node's TTFT; the prefix dots are coloured by node. ``node=`` draws one node alone.

Readable at report size: a PNG is ``FIGSIZE`` at ``DPI`` (at least 1000 px wide; the
page shows it at up to 980 px), every legend stands outside the data (right of the axes,
or right of a node grid), log axes label only as many ticks as fit, and a ratio that
flips at every admission (a contiguous allocator's eta) is drawn time-binned over its raw
series, which stays as a light line (``series.SMOOTH_ROWS``).

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

FIGSIZE = (8.0, 3.4)  # inches: 1152 x 490 px at DPI
#: a cluster run of up to this many nodes is drawn one panel per node; beyond, as a whole
MAX_NODE_PANELS = 8
DPI = 144  # pixels per inch of the PNGs (fonts are in points: the same size on the page)
#: the right edge of the axes when a legend stands to their right (figure fraction)
LEGEND_RIGHT = 0.79
COLORS = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3",
          "#8c8c8c", "#ccb974", "#64b5cd")  # fmt: skip


def new_figure(figsize: tuple[float, float] = FIGSIZE):
    """A Figure on the Agg canvas (no pyplot: nothing global, nothing displayed)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=DPI)
    # fixed margins: a layout engine costs more than the drawing itself
    fig.subplots_adjust(left=0.09, right=0.98, bottom=0.15, top=0.9)
    return fig


def _legend_outside(ax, **kw) -> None:
    """The axes' legend to the right of its data (the figure's right margin makes room)."""
    ax.figure.subplots_adjust(right=LEGEND_RIGHT)
    if kw.get("handles") is None:
        kw.pop("handles", None)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              fontsize=kw.pop("fontsize", 7), **kw)  # fmt: skip


def _log_ticks(axis, lo: float, hi: float) -> None:
    """Log-axis ticks that never crowd: 1-2-5 per decade over up to two decades, every
    decade up to eight, every other decade beyond; plain numbers, no minor labels."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    decades = np.log10(hi / lo) if lo > 0 and hi > lo else 1.0
    subs = (1.0, 2.0, 5.0) if decades <= 2 else (1.0,)
    axis.set_major_locator(LogLocator(base=10 if decades <= 8 else 100, subs=subs))
    axis.set_major_formatter(FuncFormatter(lambda x, _pos: f"{x:g}"))
    axis.set_minor_formatter(NullFormatter())


def _empty(ax, text: str) -> None:
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="#666")
    ax.set_xticks([])
    ax.set_yticks([])


def _node_grid(n: int):
    """A figure of ``n`` small panels, two per row (the legend goes to their right)."""
    cols = 1 if n == 1 else 2
    rows = -(-n // cols)
    fig = new_figure((10.0, 1.9 * rows + 0.9))
    fig.subplots_adjust(left=0.07, right=0.83, bottom=0.5 / (1.9 * rows + 0.9) + 0.04,
                        top=1 - 0.45 / (1.9 * rows + 0.9), hspace=0.75, wspace=0.2)  # fmt: skip
    axes = [fig.add_subplot(rows, cols, i + 1) for i in range(n)]
    return fig, axes


def _node_label(run, node: int) -> str:
    from sim.report.data import node_summary

    acc = node_summary(run, node).get("accelerator")
    return f"node {node}" + (f" ({acc})" if acc else "")


def _draw(run, node: int | None, draw_ax: Callable, cluster_ax: Callable | None = None) -> Any:
    """One axes for a single-node run (or ``node``); a cluster run: one panel per node
    (``draw_ax`` on that node's rows) up to ``MAX_NODE_PANELS`` nodes, beyond that one
    axes of the cluster as a whole (``cluster_ax``)."""
    from sim.report.data import load_run, node_ids, select_node

    run = load_run(run)
    if node is not None:
        run = select_node(run, node)
    ids = node_ids(run)
    if len(ids) <= 1 or (len(ids) > MAX_NODE_PANELS and cluster_ax is not None):
        fig = new_figure()
        (draw_ax if len(ids) <= 1 else cluster_ax)(fig.add_subplot(), run, None)
        return fig
    fig, axes = _node_grid(len(ids))
    for ax, i in zip(axes, ids, strict=True):
        draw_ax(ax, select_node(run, i), _node_label(run, i), legend=False)
    handles, labels = axes[0].get_legend_handles_labels()
    if handles:  # one legend for every panel, right of the grid
        fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(0.845, axes[0].get_position().y1),
                   fontsize=6, borderaxespad=0.0)  # fmt: skip
    return fig


def _title(ax, text: str, panel: str | None) -> None:
    """The axes title: the default size alone, smaller in a node's panel."""
    if panel is None:
        ax.set_title(text)
    else:
        ax.set_title(text, fontsize=8)


def _memory_ax(ax, run, panel: str | None, legend: bool = True,
               st: series.Stack | None = None) -> None:  # fmt: skip
    st = series.memory_stack(run.memory) if st is None else st
    what = "HBM per GPU by use" if "weights" in st.layers else "KV memory by use"
    _stack_ax(ax, st, "no memory records", "GB", what, panel, legend)


def _stack_ax(ax, st: series.Stack, empty: str, ylabel: str, what: str, panel: str | None,
              legend: bool) -> None:  # fmt: skip
    """A stacked area over simulated time (``empty``: the note where it has no rows)."""
    if not len(st.t_s):
        _empty(ax, empty)
        return
    ax.stackplot(st.t_s, *st.layers.values(), labels=list(st.layers), step="post",
                 colors=COLORS[: len(st.layers)], alpha=0.85)  # fmt: skip
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel(ylabel)
    _title(ax, what if panel is None else f"{panel}: {what}", panel)
    if legend:
        _legend_outside(ax)


def _cluster_memory_ax(ax, run, _panel) -> None:
    from sim.report.data import node_ids, node_summary

    ids = node_ids(run)
    gpus = {i: float(node_summary(run, i).get("num_gpus") or 1) for i in ids}
    _memory_ax(ax, run, None, st=series.cluster_memory_stack(run.memory, gpus))
    ax.set_title(f"cluster HBM by use ({len(ids)} nodes, all GPUs)")


def plot_memory(run, node: int | None = None) -> Any:
    """One GPU's HBM over time, stacked by use (GB; the KV pool alone for older runs); a
    cluster run: a panel per node (the cluster's sum beyond ``MAX_NODE_PANELS``)."""
    return _draw(run, node, _memory_ax, _cluster_memory_ax)


def _groups_ax(ax, run, panel: str | None, legend: bool = True,
               st: series.Stack | None = None) -> None:  # fmt: skip
    st = series.group_stack(run.memory_groups) if st is None else st
    _stack_ax(ax, st, "one layer group: its KV is the memory plot's", "GB (all GPUs)",
              "allocated KV by layer group", panel, legend)  # fmt: skip


def _cluster_groups_ax(ax, run, _panel) -> None:
    from sim.report.data import node_ids

    _groups_ax(ax, run, None)
    ax.set_title(f"cluster KV by layer group ({len(node_ids(run))} nodes, all GPUs)")


def plot_kv_groups(run, node: int | None = None) -> Any:
    """A model of several layer groups: its allocated KV over time stacked by group (GB,
    all GPUs; a cluster run: a panel per node, the sum beyond ``MAX_NODE_PANELS``); a
    model of one group: a note."""
    return _draw(run, node, _groups_ax, _cluster_groups_ax)


def _efficiency_ax(ax, run, panel: str | None, legend: bool = True, eff=None) -> None:
    full = series.efficiency(run.memory, max_points=None) if eff is None else eff
    eff = series.efficiency(run.memory) if eff is None else eff
    if not len(eff["t_s"]):
        _empty(ax, "no memory records")
        return
    smooth = len(full["t_s"]) > series.SMOOTH_ROWS
    names = [k for k in eff if k != "t_s"]
    for i, name in enumerate(names):  # the raw series: light when a binned mean is drawn over it
        ax.step(eff["t_s"], eff[name], where="post", color=COLORS[i],
                label=f"{name} (raw)" if smooth else name,
                lw=0.6 if smooth else 1, alpha=0.3 if smooth else 1.0)  # fmt: skip
    handles = None
    if smooth:  # the legend: one entry per series (its binned mean) and one for the raw
        from matplotlib.lines import Line2D

        span = (full["t_s"][-1] - full["t_s"][0]) / series.SMOOTH_BINS
        handles = [ax.plot(*series.time_binned_mean(full["t_s"], full[name]), color=COLORS[i],
                           lw=1.4, label=name)[0] for i, name in enumerate(names)]  # fmt: skip
        handles.append(Line2D([], [], color="#888", lw=0.6, alpha=0.5, label="light: raw"))
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("simulated time (s)" + (f"; lines: mean per {span:.3g} s" if smooth else ""))
    ax.set_ylabel("fraction")
    what = "allocation efficiency and external fragmentation"
    _title(ax, what if panel is None else panel, panel)
    if legend:
        _legend_outside(ax, handles=handles)


def _cluster_efficiency_ax(ax, run, _panel) -> None:
    from sim.report.data import node_ids, node_summary

    pools = {i: float(node_summary(run, i).get("kv_pool_bytes") or np.nan) for i in node_ids(run)}
    _efficiency_ax(ax, run, None, eff=series.cluster_efficiency(run.memory, pools))
    ax.set_title(f"allocation efficiency of the cluster ({len(pools)} nodes)")


def plot_efficiency(run, node: int | None = None) -> Any:
    """Allocation efficiency and external fragmentation over time (a cluster run: a panel
    per node; the cluster's ratios of summed bytes beyond ``MAX_NODE_PANELS``)."""
    return _draw(run, node, _efficiency_ax, _cluster_efficiency_ax)


def plot_latency_cdf(run, node: int | None = None) -> Any:
    """CDFs of TTFT, ITL and resume latency (log time axis), over all requests; a cluster
    run adds each node's TTFT CDF (thin, up to ``MAX_NODE_PANELS`` nodes)."""
    from sim.report.data import load_run, node_ids, select_node

    run = load_run(run)
    if node is not None:
        run = select_node(run, node)
    cdfs = series.latency_cdfs(run)
    fig = new_figure()
    ax = fig.add_subplot()
    if not cdfs:
        _empty(ax, "no latencies")
        return fig
    for i, (name, (x, y)) in enumerate(cdfs.items()):
        ax.step(x, y, where="post", label=name, color=COLORS[i], lw=1.2)
    ids = node_ids(run)
    if 1 < len(ids) <= MAX_NODE_PANELS and len(run.requests):
        base = len(cdfs)
        for k, i in enumerate(ids):
            x, y = series.cdf(run.requests.ttft_s[run.requests.node == i])
            if len(x):
                cdfs[f"TTFT node {i}"] = (x, y)
                ax.step(x, y, where="post", label=f"TTFT node {i}", lw=0.8, ls=":",
                        color=COLORS[(base + k) % len(COLORS)])  # fmt: skip
    if all(x.min() > 0 for x, _ in cdfs.values()):
        ax.set_xscale("log")
        _log_ticks(ax.xaxis, min(x.min() for x, _ in cdfs.values()),
                   max(x.max() for x, _ in cdfs.values()))  # fmt: skip
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("seconds (log scale)" if ax.get_xscale() == "log" else "seconds")
    ax.set_ylabel("fraction <= x")
    ax.set_title("latency CDFs")
    ax.grid(alpha=0.3)
    _legend_outside(ax)
    return fig


def plot_pauses(run, node: int | None = None) -> Any:
    """Pause decisions (bars) split by outcome (stacked), over all nodes (or ``node``)."""
    from sim.report.data import load_run, select_node

    run = load_run(run) if node is None else select_node(run, node)
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
    ax.set_xlabel("pause-policy decision")
    ax.set_ylabel("pauses")
    ax.set_title("pause decisions and outcomes")
    _legend_outside(ax, title="outcome", title_fontsize=7)
    return fig


def plot_prefix(run, node: int | None = None) -> Any:
    """Prefix hit rate of each trajectory against its start time (a cluster run: one
    colour per node, up to ``MAX_NODE_PANELS`` nodes)."""
    from sim.report.data import load_run, node_ids, select_node

    run = load_run(run) if node is None else select_node(run, node)
    fig = new_figure()
    ax = fig.add_subplot()
    ids = node_ids(run)
    traj = run.trajectories
    if 1 < len(ids) <= MAX_NODE_PANELS and "node" in traj:
        parts = [(f"node {i}", traj[traj.node == i]) for i in ids]
    else:
        parts = [(None, traj)]
    drawn = 0
    for k, (label, part) in enumerate(parts):
        t, rate = series.prefix_hit_by_trajectory(part)
        if len(t):
            ax.plot(t, rate, ".", ms=3, color=COLORS[k % len(COLORS)], label=label)
            drawn += 1
    if not drawn:
        _empty(ax, "no prefix lookups")
        return fig
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel("trajectory start (simulated s)")
    ax.set_ylabel("hit tokens / looked up")
    ax.set_title("prefix hit rate per trajectory")
    if len(parts) > 1:
        _legend_outside(ax)
    return fig


def _batch_ax(ax, run, panel: str | None, legend: bool = True) -> None:
    b = series.batch_composition(run.steps)
    if not len(b["t_s"]):
        _empty(ax, "no engine steps")
        return
    ax.stackplot(b["t_s"], b["decode"], b["prefill"], labels=["decode", "prefill"],
                 step="post", colors=COLORS[:2], alpha=0.85)  # fmt: skip
    ax.set_xlabel("simulated time (s)")
    ax.set_ylabel("tokens per step")
    _title(ax, "batch composition" if panel is None else panel, panel)
    if legend:
        _legend_outside(ax)


def _cluster_batch_ax(ax, run, _panel) -> None:
    _batch_ax(ax, run, None)  # every node's steps binned together: the mean step's batch
    ax.set_title("batch composition (mean step over all nodes)")


def plot_batch(run, node: int | None = None) -> Any:
    """Prefill and decode tokens per step over time (stacked; a cluster run: a panel per
    node, the mean step over all nodes beyond ``MAX_NODE_PANELS``)."""
    return _draw(run, node, _batch_ax, _cluster_batch_ax)


@dataclass(frozen=True)
class Plot:
    """One plot of a run report."""

    file: str  # PNG name in the run folder
    title: str
    draw: Callable[[Any], Any]
    how_to_read: str  # one sentence (report.html and docs/reports.md)


PLOTS: tuple[Plot, ...] = (
    Plot("plot_memory.png", "Memory over time", plot_memory,
         "One GPU's HBM stacked by use at each moment: weights and the reserve at the bottom "
         "are fixed; active and paused KV are the token states of running and paused "
         "sequences (a shared block once); whatever sits above them (prefix cache, internal "
         "and external waste, free) is memory that serves no token now."),
    Plot("plot_efficiency.png", "Allocation efficiency and fragmentation", plot_efficiency,
         "eta_alloc is the share of allocated memory holding token states, eta_effective the "
         "share of the whole pool; phi_ext (when recorded) is the share of free memory too "
         "scattered to fit a request, so high phi_ext with free memory left means "
         "fragmentation, not capacity, is refusing work. A run of many memory rows draws "
         "each ratio as its time-weighted mean per bin (the bin's length under the axis) "
         "over the raw series, drawn light."),
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


#: the page-only plot of a model of several layer groups (report.html embeds it; no PNG
#: file, so every report keeps ``report_files()``, and a one-group model's costs nothing)
KV_GROUPS_PLOT = Plot("kv_groups", "KV by layer group", plot_kv_groups,
         "A hybrid, windowed or MLA + indexer model's allocated KV stacked by layer group "
         "(memory_groups.parquet): full-attention layers grow with the context, "
         "sliding-window and chunked layers level off at their window's blocks, state "
         "layers hold one state per sequence, and the table gives each group's largest row "
         "and time-weighted mean (summary.json's peak_allocated_bytes_by_group, "
         "allocated_bytes_by_group_mean).")  # fmt: skip


def figure_png(fig) -> bytes:
    """The figure as PNG bytes (no software tag, so the bytes carry no URL)."""
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, metadata={"Software": None})
    return buf.getvalue()
