"""h53: a hybrid model's ``useful_bytes`` (so ``eta_alloc`` and the GPU breakdown) counts
the token states its side groups really hold, computed here by hand from each model's
geometry (its profile's layers, heads and window), not from the engine's sizing code.

The rule (docs/allocators.md, "Side token states are useful"): the table's distinct tokens
times the full-attention layers' bytes per token, plus, per side group, the tokens in each
sliding window (``min(S, w)``) times its real layers' bytes per token, or one state per
sequence per real state-space layer (a Mamba state is real state). vLLM's padding layers
and the unfilled slots of whole blocks are waste.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from engine_helpers import one_request_doc

from sim.run import run_scenario

BF16 = 2


def _run(tmp_path, model: str, prompt: int, output: int):
    doc = one_request_doc(model, prompt, output, 16)
    path = tmp_path / f"{model}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return run_scenario(str(path), **{"engine.check_invariants": True})


def test_gemma_one_request_eta_from_the_geometry(tmp_path):
    """gemma-3-27b: 62 layers, 5 sliding (window 1,024) per full one -> 10 full, 52
    sliding; 16 KV heads x 128 x K and V x bf16 = 8,192 B per token per layer. vLLM pads
    the 52 sliding layers to 60 (a multiple of the 10 full ones' group size)."""
    per_layer = 2 * 16 * 128 * BF16
    full, sliding, padded, window, block = 10, 52, 60, 1024, 16
    prompt, output = 8192, 16
    run = _run(tmp_path, "gemma-3-27b", prompt, output)
    m = run.memory
    rows = m[m.num_sequences == 1]
    assert len(rows) == output  # one row after admission, then one per decode step
    tokens = prompt + np.arange(len(rows))  # row i: the prompt and i sampled tokens
    # row 0 is the prompt's one prefill step, tokens [0, 8192): the sliding layers hold
    # (and use) every one of them during it (vLLM V1); the decode steps the last window
    in_window = np.minimum(tokens, window)
    in_window[0] = prompt
    want_useful = tokens * full * per_layer + sliding * in_window * per_layer
    assert rows.useful_bytes.to_numpy(float) == pytest.approx(want_useful, rel=1e-12)
    # allocated: the table's whole blocks, and the window's blocks of the padded layers
    table = -(-tokens // block) * block * full * per_layer
    window_blocks = -(-tokens // block) - np.maximum(0, tokens - window) // block
    window_blocks[0] = prompt // block
    side = window_blocks * block * padded * per_layer
    assert rows.side_kv_bytes.to_numpy(float) == pytest.approx(side, rel=1e-12)
    allocated = rows.allocated_bytes.to_numpy(float)
    assert allocated == pytest.approx(table + side, rel=1e-12)
    eta = want_useful / (table + side)
    assert eta[0] == pytest.approx((full + sliding) / (full + padded), rel=1e-12)  # 62 / 70
    # a decoding sequence of 8,192 tokens (the decode rule's 64 window blocks): ~94.3 %
    decode = 8192 * full * per_layer + sliding * window * per_layer
    assert decode / (8192 * full * per_layer + 64 * block * padded * per_layer) == pytest.approx(
        1_107_296_256 / 1_174_405_120, rel=1e-12)
    assert rows.eta_alloc.to_numpy(float) == pytest.approx(eta, rel=1e-12)
    # the summary's time-weighted mean over the time anything is allocated
    t = m.t_s.to_numpy(float)
    dt = np.diff(t)[: len(rows)]
    assert run.summary["eta_alloc_mean"] == pytest.approx((eta * dt).sum() / dt.sum(), rel=1e-9)
    # the GPU breakdown agrees: active = the states (to one slot), the rest internal waste
    slot = full * per_layer
    active = rows.gpu_active_kv_bytes.to_numpy(float)
    waste = rows.gpu_internal_waste_bytes.to_numpy(float)
    assert np.abs(active - want_useful).max() < slot
    assert active + waste == pytest.approx(allocated, abs=2)  # integer rounding only
    # 8,192 tokens fill whole blocks: the waste is the 8 padding layers' blocks, during
    # the prefill step all 8,192 tokens of them
    assert abs(waste[0] - (padded - sliding) * prompt * per_layer) < slot


def test_state_space_hybrid_counts_each_state_once(tmp_path):
    """nemotron-h-8b: 4 attention layers (8 KV heads x 128, bf16) and 24 Mamba2 layers,
    each holding a conv state ((kernel 4 - 1) x 10,240 channels x bf16) and an SSM state
    (128 heads x 64 x 128 x bf16) per sequence, whatever its length: useful."""
    attention = 4 * 2 * 8 * 128 * BF16
    state = 24 * ((4 - 1) * 10240 * BF16 + 128 * 64 * 128 * BF16)
    prompt, output = 8180, 12
    run = _run(tmp_path, "nemotron-h-8b", prompt, output)
    rows = run.memory[run.memory.num_sequences == 1]
    tokens = prompt + np.arange(len(rows))
    assert rows.useful_bytes.to_numpy(float) == pytest.approx(tokens * attention + state, rel=1e-12)
    assert (rows.useful_bytes <= rows.allocated_bytes).all()


def test_group_rules_and_a_fork_counting_its_parents_states_once():
    """The per-group rule by hand, and a fork's child counting only what it wrote after
    the fork (its parent's states are counted once, by the parent)."""
    from sim.memory import make_allocator
    from sim.sizing.group_demand import GroupDemand, KVGroups

    sliding = GroupDemand("s", "sliding_window", 3000.0, 100, 0.0, real_bytes_per_token=2000.0)
    chunked = GroupDemand("c", "chunked_local", 500.0, 64, 0.0)
    state = GroupDemand("m", "mamba", 0.0, 0, 70_000.0, real_state_bytes=50_000.0)
    assert [sliding.useful_bytes(s) for s in (0, 50, 100, 333)] == [0, 100_000, 200_000, 200_000]
    assert [chunked.useful_bytes(s) for s in (64, 65, 130)] == [32_000, 500, 1000]
    assert [state.useful_bytes(s) for s in (0, 1, 9999)] == [0, 50_000, 50_000]
    assert sliding.useful_bytes(333, since=300) == 33 * 2000  # written after a fork at 300
    groups = KVGroups(1000.0, (sliding, chunked, state), 5500.0)
    a = make_allocator("paged", pool_bytes=50e6, kv_bytes_per_token=1000.0, block_size=16,
                       kv_groups=groups)  # fmt: skip
    assert a.allocate("x", 50)
    side = 50 * 2000 + 50 * 500 + 50_000
    assert a.metrics().useful_bytes == 50 * 1000 + side
    assert a.fork("x", "y")
    assert a.metrics().useful_bytes == 50 * 1000 + side  # shared: once
    assert a.append("y", 20)
    a.check_invariants()
    own = 20 * 2000 + (70 - 64) * 500 + 50_000  # y's window, chunk and state since the fork
    assert a.metrics().useful_bytes == 70 * 1000 + side + own
    a.free("x")
    a.check_invariants()
    assert a.metrics().useful_bytes == 70 * 1000 + own
