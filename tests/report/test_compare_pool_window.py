"""``kvsim compare``'s pool shares over one window for every variant (h111 finding 1).

The trial's repro: static (reserving 2,048 tokens a request) against paged on the
allocator study at 100 requests. Static's requests wait for memory; paged's never do. Each
variant used to be averaged over its own window (static's busy time, paged's whole run),
so paged's idle free memory read as "+4216 %" external fragmentation. The rule: one
window for all (the time requests waited when every variant waited, else the whole run),
named under the table, ``external`` split into fragmentation and free memory."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from report_helpers import ROOT

from sim.report.compare import compare_text
from sim.report.compare_plots import _pool_layers
from sim.report.data import load_run
from sim.report.variant_rows import compare_frame, table_window, variant_row
from sim.run import run_scenario

STUDY = str(ROOT / "workloads" / "allocator_study.yaml")
VARIANTS = {"static": {"kind": "static", "max_tokens": 2048},
            "paged": {"kind": "paged", "block_size": 16}}  # fmt: skip


@pytest.fixture(scope="module")
def runs():
    return {name: load_run(run_scenario(STUDY, allocator=opts, **{"workload.num_requests": 100}))
            for name, opts in VARIANTS.items()}  # fmt: skip


def _share(run, column: str, busy: bool) -> float:
    """Σ column x dt / (pool x Σ dt) over memory.parquet's rows (each lasting until the
    next, the last until the run's end), over the whole run or the rows with requests
    waiting: the time-average the docs define."""
    m = run.memory
    t = m.t_s.to_numpy(float)
    dt = np.diff(np.append(t, max(run.summary["sim_time_s"], t[-1])))
    if busy:
        dt = np.where(m.n_waiting.to_numpy() > 0, dt, 0.0)
    return float((m[column].to_numpy(float) * dt).sum() / (run.summary["kv_pool_bytes"] * dt.sum()))


def test_every_variant_is_read_over_the_whole_run_when_one_never_waited(runs):
    static, paged = runs["static"], runs["paged"]
    assert (static.memory.n_waiting > 0).any() and not (paged.memory.n_waiting > 0).any()
    frame = compare_frame([variant_row(n, [r]) for n, r in runs.items()])
    assert table_window(frame) == "run"
    for name, run in runs.items():
        row = frame.set_index("variant").loc[name]
        assert row.pool_run_token_states == pytest.approx(_share(run, "useful_bytes", False))
        assert row.pool_run_cached == pytest.approx(_share(run, "cached_bytes", False))
    # the busy window: static's own, none for paged
    assert frame.pool_busy_token_states[0] == pytest.approx(_share(static, "useful_bytes", True))
    assert np.isnan(frame.pool_busy_token_states[1])
    # the old column keeps its meaning: each variant's own window
    assert frame.pool_token_states[0] == pytest.approx(_share(static, "useful_bytes", True))
    assert frame.pool_token_states[1] == pytest.approx(_share(paged, "useful_bytes", False))
    # paged: no fragmentation (F9 is 0 for blocks), its external is idle free memory
    assert frame.pool_run_external_fragmentation[1] == 0.0
    assert frame.pool_run_free[1] == pytest.approx(frame.pool_run_external[1])
    # external over the whole run: the pool neither allocated nor cached (the free blocks
    # and the remainder no block fits in)
    assert frame.pool_run_external[1] == pytest.approx(
        1 - _share(paged, "allocated_bytes", False) - _share(paged, "cached_bytes", False))
    # the time that waited, of the run
    t = static.memory.t_s.to_numpy(float)
    dt = np.diff(np.append(t, static.summary["sim_time_s"]))
    busy = dt[static.memory.n_waiting.to_numpy() > 0].sum() / dt.sum()
    assert frame.pool_busy_fraction.tolist() == pytest.approx([busy, 0.0])

    text = compare_text(frame)
    lines = text.splitlines()
    row = next(ln for ln in lines if ln.startswith("pool: token states  "))
    assert f"{100 * frame.pool_run_token_states[0]:,.4g}" in row
    assert f"{100 * frame.pool_run_token_states[1]:,.4g}" in row
    note = next(ln for ln in lines if ln.startswith("pool: time-averaged"))
    assert "whole run" in note and "every variant" in note and "never waited in paged" in note
    frag = next(ln for ln in lines if ln.startswith("pool: external, fragmentation  "))
    free = next(ln for ln in lines if ln.startswith("pool: external, free  "))
    assert frag.split()[-2:] == ["0", "(-100.0%)"]  # paged: none
    assert f"{100 * frame.pool_run_free[1]:,.4g}" in free
    # the figure draws the same window
    layers = _pool_layers({n: [r] for n, r in runs.items()}, frame)
    assert layers["token_states"] == pytest.approx(100 * frame.pool_run_token_states.to_numpy())
    assert layers["free"] == pytest.approx(100 * frame.pool_run_free.to_numpy())


def test_every_variant_is_read_over_the_time_requests_waited_when_all_waited():
    frame = pd.DataFrame({"variant": ["a", "b"], "pool_run_token_states": [0.2, 0.3],
                          "pool_busy_token_states": [0.4, 0.5],
                          "pool_busy_fraction": [0.9, 0.5]})  # fmt: skip
    assert table_window(frame) == "busy"
    text = compare_text(frame)
    row = next(ln for ln in text.splitlines() if ln.startswith("pool: token states  "))
    assert row.split()[-3:] == ["40", "50", "(+25.0%)"]
    assert "pool: time-averaged over the time requests waited for memory" in text
    # a variant without any memory record (a failed run) does not force the whole run
    failed = pd.concat([frame, pd.DataFrame({"variant": ["c"], "pool_run_token_states": [np.nan],
                                             "pool_busy_token_states": [np.nan]})])  # fmt: skip
    assert table_window(failed) == "busy"
    # an older compare.parquet: its pool_<share>, said to be each variant's own window
    old = pd.DataFrame({"variant": ["a", "b"], "pool_token_states": [0.2, 0.3]})
    assert table_window(old) is None
    assert "each variant's own window" in compare_text(old)


def test_a_variant_whose_seeds_did_not_all_wait_has_no_busy_window(runs):
    """Replications: a variant reads the busy window only when every seed's requests
    waited; one seed that waited must not stand for the variant (h117's review)."""
    static, paged = runs["static"], runs["paged"]
    mixed = variant_row("mixed", [static, paged])  # one waited, one never did
    assert np.isnan(mixed["pool_busy_token_states"]) and np.isnan(mixed["pool_busy_external"])
    frac = [variant_row(n, [r])["pool_busy_fraction"] for n, r in (("s", static), ("p", paged))]
    assert frac[1] == 0.0 and mixed["pool_busy_fraction"] == pytest.approx(sum(frac) / 2)
    assert mixed["pool_run_token_states"] == pytest.approx(
        (_share(static, "useful_bytes", False) + _share(paged, "useful_bytes", False)) / 2)
    both = variant_row("both", [static, static])  # every seed waited: its busy window
    assert both["pool_busy_token_states"] == pytest.approx(_share(static, "useful_bytes", True))
    frame = compare_frame([mixed, both])
    assert table_window(frame) == "run"
