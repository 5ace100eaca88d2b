"""Plots and offline HTML from a run's tables; never imported by the simulation core.

    from sim.report import plot_memory, plot_latency_cdf, plot_compare, render_report
    fig = plot_memory("runs/demo")          # a matplotlib Figure (a run folder or a RunResult)
    fig = plot_compare({"hold": "runs/a", "offload": "runs/b"})   # the pool view
    render_report(result, "runs/demo")      # plot_*.png + report.html

Layer: above ``sim/run`` (it reads ``RunResult`` objects and run folders), below
``sim/cli``. matplotlib is imported only when a figure is drawn (Agg canvas, no pyplot).

Invariant: reporting never changes a run's summary or tables; every page it writes is
self-contained (no URL but its own ``data:`` images).
"""

from sim.report.compare_plots import plot_compare
from sim.report.data import RunData, load_run
from sim.report.plots import (
    PLOTS,
    plot_batch,
    plot_efficiency,
    plot_kv_groups,
    plot_latency_cdf,
    plot_memory,
    plot_pauses,
    plot_prefix,
)
from sim.report.render import rebuild_report, render_report, report_files

__all__ = [
    "PLOTS",
    "RunData",
    "load_run",
    "plot_batch",
    "plot_compare",
    "plot_efficiency",
    "plot_kv_groups",
    "plot_latency_cdf",
    "plot_memory",
    "plot_pauses",
    "plot_prefix",
    "rebuild_report",
    "render_report",
    "report_files",
]
