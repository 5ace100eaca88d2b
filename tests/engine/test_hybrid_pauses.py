"""Issue 27 follow-ups: a hybrid model's pause moves the bytes its sequence holds (its
block table's tokens plus its side groups' blocks or states), not every layer for every
token (F1); a dense model's pause is F1 exactly (E24 in test_pause_policies)."""

from __future__ import annotations

import math

import pytest
from engine_helpers import run

from sim.profiles import load_model
from sim.sizing.group_demand import kv_groups

E24 = "seed_tool_wait_45s.yaml"  # TP8, paged B=16, 32,768 tokens at the pause
B, GPUS, TOKENS = 16, 8, 32768


@pytest.mark.parametrize("model", ["gemma-3-27b", "qwen3-next-80b-a3b"])
@pytest.mark.parametrize("kind", ["offload_host", "hold"])
def test_hybrid_pause_state_is_what_the_sequence_holds(model, kind):
    r = run(E24, **{"model.profile": model, "pause_policy.kind": kind})
    (p,) = r.pauses.itertuples()
    g = kv_groups(load_model(model), GPUS, 1, num_gpus=GPUS)
    assert g.hybrid and p.tokens == TOKENS
    want = TOKENS * g.table_bytes_per_token + g.side_bytes(TOKENS, B)
    assert math.isclose(p.state_bytes, want, rel_tol=1e-12)
    # sliding windows hold far less than every layer per token; a Mamba/linear-attention
    # state adds bytes the table's tokens do not count
    assert p.state_bytes != TOKENS * r.summary["kv_bytes_per_token"]
    if kind == "offload_host":
        assert math.isclose(r.summary["bytes_offloaded"], want, rel_tol=1e-12)
        assert math.isclose(r.summary["bytes_reloaded"], want, rel_tol=1e-12)
