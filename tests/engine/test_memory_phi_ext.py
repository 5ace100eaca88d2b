"""memory.parquet's external fragmentation columns (``phi_ext``, ``phi_ext_next``) and the
scenario's ``metrics.phi_ext_request_tokens``; the printout names its paused KV figure."""

from __future__ import annotations

import math

import numpy as np
import pytest
from engine_helpers import WORKLOADS

from sim.errors import KvsimError
from sim.memory import make_allocator
from sim.metrics.recorder import Recorder
from sim.report.text import summary_rows
from sim.run import run_scenario
from sim.scenario.schema import DEFAULT_PHI_EXT_REQUEST_TOKENS

STUDY = str(WORKLOADS / "allocator_study.yaml")
CONTIGUOUS = {"kind": "contiguous", "placement": "first_fit", "reservation": "window",
              "window_tokens": 2048}  # fmt: skip


def _memory(allocator: dict, **overrides):
    overrides = {"workload.num_requests": 120, "allocator": allocator, **overrides}
    return run_scenario(STUDY, **overrides)


def test_block_kinds_report_zero_when_anything_is_free_and_nan_when_nothing_is():
    m = _memory({"kind": "paged", "block_size": 16}).memory
    free = m.free_bytes.to_numpy() > 0
    assert free.any()
    assert (m.phi_ext.to_numpy()[free] == 0).all()
    assert m.phi_ext[~free].isna().all()
    # phi_ext_next: defined exactly where something waits and something is free
    waits = (m.n_waiting.to_numpy() > 0) & free
    assert m.phi_ext_next.notna().to_numpy().tolist() == waits.tolist()


def test_contiguous_phi_ext_is_f9_of_the_free_holes():
    r = _memory(CONTIGUOUS)
    m = r.memory
    ref_bytes = DEFAULT_PHI_EXT_REQUEST_TOKENS * r.summary["kv_bytes_per_token"]
    phi = m.phi_ext.to_numpy()
    assert not np.isnan(phi).any()  # the window reservation never fills the pool exactly
    too_small = m.largest_free_bytes.to_numpy() < ref_bytes
    assert too_small.any() and (~too_small).any()
    assert (phi[too_small] == 1.0).all()  # no hole fits it: every free byte is unusable
    assert (phi[~too_small] < 1.0).all()
    one_hole = ~too_small & (m.n_free_extents.to_numpy() == 1)
    assert one_hole.any() and (phi[one_hole] == 0.0).all()
    # the head request asks for its window (2,048 tokens) and waits because no hole fits
    waits = m.n_waiting.to_numpy() > 0
    assert waits.any() and (m.phi_ext_next.to_numpy()[waits] == 1.0).all()
    assert m.phi_ext_next[~waits].isna().all()


def test_the_reference_size_comes_from_the_scenario():
    small = _memory(CONTIGUOUS, **{"metrics.phi_ext_request_tokens": 1}).memory
    # one token fits any hole, so nothing is external fragmentation
    assert (small.phi_ext.dropna() == 0.0).all() and small.phi_ext.notna().all()


def test_recorder_phi_ext_exact_values():
    alloc = make_allocator("contiguous", pool_bytes=100, kv_bytes_per_token=1)
    for i, n in enumerate((10, 20, 30, 40)):
        assert alloc.allocate(i, n)
    alloc.free(0)
    alloc.free(2)  # holes of 10 and 30 bytes, nothing else free
    m = alloc.metrics()
    assert m.free_extents == (10, 30)
    rec = Recorder(pool_bytes=100, phi_ext_request_bytes=20)
    rec.memory(0.0, m, 0.0, 0, 0, 1, next_request_bytes=40)
    row = rec.frames()["memory"].iloc[0]
    assert row.phi_ext == pytest.approx(1 - 30 / 40)  # the 10-byte hole is too small
    assert row.phi_ext_next == 1.0  # no hole holds 40 bytes
    block = Recorder(pool_bytes=100, phi_ext_request_bytes=20, block_kind=True)
    block.memory(0.0, m, 0.0, 0, 0, 0)
    row = block.frames()["memory"].iloc[0]
    assert row.phi_ext == 0.0 and math.isnan(row.phi_ext_next)


@pytest.mark.parametrize("bad", [0, -5, 2.5, "many"])
def test_bad_reference_size_is_a_one_line_error(bad):
    with pytest.raises(KvsimError) as exc:
        _memory(CONTIGUOUS, **{"metrics.phi_ext_request_tokens": bad})
    text = str(exc.value)
    assert "phi_ext_request_tokens" in text and "\n" not in text


def test_unknown_metrics_key_is_refused():
    with pytest.raises(KvsimError, match="metrics"):
        _memory(CONTIGUOUS, **{"metrics.phi_ext_tokens": 5})


def test_the_printout_says_its_paused_kv_is_the_logical_figure():
    labels = [row[0] for row in summary_rows({"paused_kv_bytes_mean": 2.0e9})]
    assert "paused KV, logical (mean)" in labels


def test_the_printout_gives_the_physical_paused_hbm_beside_the_logical():
    rows = {row[0]: row[1] for row in summary_rows(
        {"paused_kv_bytes_mean": 2.0e9, "paused_hbm_bytes_mean": 1.5e9})}
    assert rows["paused KV, logical (mean)"] == "2.00"
    assert rows["paused KV, physical HBM (mean)"] == "1.50"
