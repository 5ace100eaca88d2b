"""The figures read at a glance at report size, measured on the figure objects: PNGs at
least 1000 px wide, legends outside the data, log tick labels that never overlap,
variants named on the compare axes, no empty axis for an all-zero metric, the pool figure
across the canvas with free memory apart from external fragmentation, and a contiguous
allocator's efficiency drawn as a time-binned mean over its raw series."""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pytest
from report_helpers import SWARM

from sim.report import series
from sim.report.compare_plots import POOL_LABELS, plot_metrics, plot_pool, plot_ttft
from sim.report.data import load_run
from sim.report.plots import (
    PLOTS,
    _log_ticks,
    figure_png,
    new_figure,
    plot_efficiency,
    plot_latency_cdf,
)
from sim.report.pool import external_parts, pool_shares
from sim.run import run_scenario


def _png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", png[16:24])


def _renderer(fig):
    """Lay the figure out on the Agg canvas figure_png draws it with; its renderer."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else FigureCanvasAgg(fig)
    canvas.draw()
    return canvas.get_renderer()


def _legends(fig):
    return [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)


def _overlap(a, b) -> bool:
    """Two display boxes share area (touching edges do not count)."""
    return a.x0 < b.x1 - 0.5 and b.x0 < a.x1 - 0.5 and a.y0 < b.y1 - 0.5 and b.y0 < a.y1 - 0.5


def _tick_labels_overlap(fig, axis_of) -> list[tuple[str, str]]:
    r = _renderer(fig)
    clashes = []
    for ax in fig.axes:
        labels = [t for t in axis_of(ax).get_ticklabels() if t.get_visible() and t.get_text()]
        boxes = [(t.get_text(), t.get_window_extent(r)) for t in labels]
        for i, (ta, a) in enumerate(boxes):
            clashes += [(ta, tb) for tb, b in boxes[i + 1:] if _overlap(a, b)]
    return clashes


@pytest.fixture(scope="module")
def contiguous_run():
    """The small swarm on a contiguous allocator: eta_alloc moves at every admission and
    growth (281 memory rows)."""
    return run_scenario(SWARM, **{"workload.num_trajectories": 6, "allocator": {"kind": "contiguous"}})


# ------------------------------------------------------------------ run report
def test_every_run_png_is_at_least_1000_px_wide(agent_run):
    for plot in PLOTS:
        width, height = _png_size(figure_png(plot.draw(agent_run)))
        assert width >= 1000 and height >= 400, plot.file


def test_every_legend_stands_outside_the_data(agent_run, contiguous_run):
    drawn = 0
    for run in (agent_run, contiguous_run):
        for plot in PLOTS:
            fig = plot.draw(run)
            r = _renderer(fig)
            for legend in _legends(fig):
                box = legend.get_window_extent(r)
                for ax in fig.axes:
                    assert not _overlap(box, ax.get_window_extent(r)), plot.file
                drawn += 1
    assert drawn >= 8  # memory, efficiency, latency, pauses, batch at least


def test_memory_legend_leaves_the_first_seconds_visible(agent_run):
    fig = PLOTS[0].draw(agent_run)
    r = _renderer(fig)
    ax = fig.axes[0]
    legend = ax.get_legend().get_window_extent(r)
    assert legend.x0 > ax.get_window_extent(r).x1  # right of the data, whatever the time


def test_latency_log_ticks_never_overlap(agent_run, e20_run):
    for run in (agent_run, e20_run):
        fig = plot_latency_cdf(run)
        assert fig.axes[0].get_xscale() == "log"
        assert _tick_labels_overlap(fig, lambda ax: ax.xaxis) == []
        labels = [t.get_text() for t in fig.axes[0].get_xticklabels() if t.get_text()]
        assert len(labels) >= 2  # still labelled


@pytest.mark.parametrize(("lo", "hi"), [(0.015, 0.25), (1e-3, 2.0), (1e-4, 1e4), (0.9, 1.1)])
def test_log_ticks_fit_any_range(lo, hi):
    fig = new_figure()
    ax = fig.add_subplot()
    ax.step([lo, hi], [0, 1])
    ax.set_xscale("log")
    _log_ticks(ax.xaxis, lo, hi)
    assert _tick_labels_overlap(fig, lambda a: a.xaxis) == []
    assert all(not t.get_text() for t in ax.xaxis.get_minorticklabels())


def test_contiguous_efficiency_is_a_binned_mean_over_the_light_raw(contiguous_run):
    mem = contiguous_run.memory
    assert len(mem) > series.SMOOTH_ROWS
    ax = plot_efficiency(contiguous_run).axes[0]
    lines = {ln.get_label(): ln for ln in ax.lines}
    raw, mean = lines["eta_alloc (raw)"], lines["eta_alloc"]
    assert raw.get_alpha() <= 0.3 < (mean.get_alpha() or 1.0)
    idx = series.stride_index(len(mem))
    assert np.array_equal(raw.get_ydata(), mem.eta_alloc.to_numpy()[idx], equal_nan=True)
    t, m = series.time_binned_mean(mem.t_s.to_numpy(), mem.eta_alloc.to_numpy())
    assert np.array_equal(mean.get_xdata(), t) and np.array_equal(mean.get_ydata(), m, equal_nan=True)
    assert len(t) == series.SMOOTH_BINS
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "eta_alloc" in labels and "light: raw" in labels and "eta_alloc (raw)" not in labels
    assert "mean per" in ax.get_xlabel()


def test_time_binned_mean_is_the_step_functions_mean():
    t = np.array([0.0, 1.0, 2.0, 4.0])
    t_mid, m = series.time_binned_mean(t, np.array([0.0, 1.0, 0.5, 7.0]), bins=2)
    assert t_mid.tolist() == [1.0, 3.0] and m.tolist() == [0.5, 0.5]  # the last row: no length
    _, m = series.time_binned_mean(t, np.array([0.0, 1.0, np.nan, 1.0]), bins=2)
    assert m[0] == 0.5 and np.isnan(m[1])  # NaN carries no weight
    _, m = series.time_binned_mean(t, np.array([1.0, 0.0, 0.0, 0.0]), bins=4)
    assert m.tolist() == [1.0, 0.0, 0.0, 0.0]


# ------------------------------------------------------------------ compare figures
FRAME = pd.DataFrame({
    "variant": ["allocator=buddy-window", "allocator=paged-but-with-a-very-long-name-x"],
    "ttft_s.p99": [0.120, 0.080], "itl_s.p99": [114.9, 33.48],  # 114,900 ms: whole numbers
    "output_tokens_per_s": [900.0, 1200.0], "eta_alloc_mean": [0.25, 0.97],
    "preemptions": [0.0, 0.0],  # all 0: a note, not an empty +/-0.04 axis
})  # prefix_hit_rate absent: "not reported"  # fmt: skip


def test_compare_metrics_names_the_variants_on_the_axis():
    fig = plot_metrics({}, FRAME)
    first = fig.axes[0]
    names = [t.get_text().replace("\n", "") for t in first.get_yticklabels()]
    assert names == list(FRAME.variant)  # named, in table order, not 1, 2
    assert not fig.texts or all("1:" not in t.get_text() for t in fig.texts)  # no footnote key
    bars = first.patches
    assert [b.get_width() for b in bars] == pytest.approx([120.0, 80.0])  # TTFT p99 in ms
    assert _tick_labels_overlap(fig, lambda ax: ax.yaxis) == []
    assert _tick_labels_overlap(fig, lambda ax: ax.xaxis) == []
    itl = {ax.get_title(): ax for ax in fig.axes}["ITL p99 (ms)"]
    assert [t.get_text() for t in itl.texts] == ["114,900", "33,480"]  # no 1.149e+05
    r = _renderer(fig)
    for ax in fig.axes:  # names stay inside the canvas
        for t in ax.get_yticklabels():
            if t.get_text():
                assert t.get_window_extent(r).x0 >= 0


def test_an_all_zero_metric_says_so_instead_of_an_empty_axis():
    fig = plot_metrics({}, FRAME)
    by_title = {ax.get_title(): ax for ax in fig.axes}
    zero, missing = by_title["preemptions"], by_title["prefix hit rate (%)"]
    assert [t.get_text() for t in zero.texts] == ["all variants 0"] and not zero.patches
    assert [t.get_text() for t in missing.texts] == ["not reported"] and not missing.patches
    assert zero.get_xticks().size == 0 and zero.get_yticks().size == 0


def test_compare_pngs_are_wide_and_their_legends_outside(e20_run):
    named = {"paged": [load_run(e20_run)], "paged again": [load_run(e20_run)]}
    for draw in (plot_metrics, plot_ttft, plot_pool):
        fig = draw(named)
        assert _png_size(figure_png(fig))[0] >= 1000, draw.__name__
        r = _renderer(fig)
        for legend in _legends(fig):
            for ax in fig.axes:
                assert not _overlap(legend.get_window_extent(r), ax.get_window_extent(r))


def test_pool_figure_uses_the_canvas_and_a_paged_run_shows_no_fragmentation(e20_run):
    parts = external_parts(e20_run)
    shares = pool_shares(e20_run)
    assert parts["external_fragmentation"] == 0.0  # paged: any free block serves
    assert parts["free"] == pytest.approx(shares["external"]) and shares["external"] > 0.05
    fig = plot_pool({"paged": [load_run(e20_run)]})
    ax = fig.axes[0]
    pos = ax.get_position()
    assert pos.x1 - pos.x0 >= 0.85  # no third of the canvas left for the legend
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert POOL_LABELS["free"] in labels and POOL_LABELS["external_fragmentation"] in labels
    assert not any("others" in x for x in labels)
    heights = {lab: p.get_height() for p, lab in zip(ax.patches, labels, strict=False)}
    assert heights[POOL_LABELS["external_fragmentation"]] == 0.0
    assert heights[POOL_LABELS["free"]] == pytest.approx(100 * shares["external"])
