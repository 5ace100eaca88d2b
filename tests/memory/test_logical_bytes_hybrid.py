"""``logical_bytes`` (F7) counts a hybrid model's side token states as ``useful_bytes``
does, so ``logical / useful`` stays the sharing gain (>= 1, and 1 when nothing is shared).

Before: logical counted the block table's tokens only while useful added each sequence's
windows and states, so on qwen3-next (a 39,518,208 B DeltaNet state per sequence at TP 1)
three unshared requests read logical / useful = 0.71 with no sharing at all (a probe)."""

from __future__ import annotations

from sim.run import run_scenario

HYBRID = {
    "model": {"profile": "qwen3-next-80b-a3b", "overrides": {"weight_dtype": "fp8"}},
    "hardware": {"accelerator": "h200-141gb", "tp": 1},
    "workload": {"kind": "requests", "requests": [
        {"count": 3, "at_s": 0.0, "prompt_tokens": 2000, "output_tokens": 20}]},
}  # fmt: skip


def test_nothing_shared_logical_equals_useful_on_a_hybrid_model():
    r = run_scenario({**HYBRID, "allocator": {"kind": "paged", "block_size": 16}})
    m = r.memory[r.memory.num_sequences > 0]
    assert len(m) > 0
    assert (m.logical_bytes == m.useful_bytes).all()
    # and the states are in both: beyond the table's tokens x its bytes per token
    per_token = r.summary["kv_bytes_per_token"]
    assert (m.logical_bytes > m.num_sequences * 2000 * per_token).all()
