"""Issue 27 item 2: a one-request run's ``peak_allocated_bytes`` equals ``kvsim plan
--json``'s ``peak_kv_bytes_per_trajectory`` within block rounding, per model (hybrid and
dense): for a sliding window or chunk that is its prompt's second 8,192-token prefill chunk
(``w - 1`` tokens plus the chunk, vLLM V1's rule), else ``kv_bytes_per_trajectory``.

The engine holds whole blocks: the table's last block (B tokens of the table groups), the
side groups' blocks rounded up to one table block, and a sliding window's ceil(w/B) + 1
blocks against the plan's w tokens; the tolerance below is exactly that rounding.
"""

from __future__ import annotations

import json

import pytest
import yaml
from engine_helpers import one_request_doc

from sim.profiles import load_model
from sim.run import run_scenario
from sim.sizing.group_demand import kv_groups
from sim.sizing.hybrid_pages import unify_pages
from sim.sizing.kv import kv_bytes_for_context

B = 16

# model -> (prompt, output): prompt + output ends a Llama 4 chunk (8,192), inside each window
CASES = {
    "gemma-3-27b": (16370, 14),
    "gpt-oss-120b": (16370, 14),
    "qwen3-next-80b-a3b": (16370, 14),
    "llama-4-scout-17b-16e": (16370, 14),
    "deepseek-v3.2": (16370, 14),
    "nemotron-h-8b": (8180, 12),
    "llama-3.1-8b": (16370, 14),
}


def _scenario(tmp_path, model: str, prompt: int, output: int) -> str:
    doc = one_request_doc(model, prompt, output, B)
    path = tmp_path / f"{model}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _rounding_bytes(model: str) -> float:
    """The most whole blocks can add to the plan's exact bytes (see the module docstring),
    at the block size the run uses (raised as vLLM does for a model with state layers)."""
    m = load_model(model)
    g, b = kv_groups(m, 1, 1), unify_pages(m, B).block_size_tokens
    table = g.table_bytes_per_token or g.all_bytes_per_token
    side = sum(2 * b * s.bytes_per_token for s in g.side)
    return b * table + (b * table if g.hybrid else 0) + side


@pytest.mark.parametrize("model", sorted(CASES))
def test_one_request_peak_matches_plan(model, tmp_path, run_cli):
    prompt, output = CASES[model]
    code, out, _ = run_cli(
        f"kvsim plan --model {model} --gpu h200-141gb --num-gpus 1 "
        f"--context {prompt + output} --json"
    )
    assert code == 0
    (ctx,) = json.loads(out)["contexts"]
    plan = ctx["peak_kv_bytes_per_trajectory"]
    run = run_scenario(_scenario(tmp_path, model, prompt, output),
                       **{"engine.check_invariants": True})  # fmt: skip
    s = run.summary
    assert s["requests_completed"] == 1
    peak = s["peak_allocated_bytes"]
    assert plan <= peak <= plan + _rounding_bytes(model), (peak, plan)


def test_gemma_no_longer_charges_every_layer(tmp_path):
    """The issue's figure: 16k tokens on gemma-3-27b peaked at 8.32 GB (every layer for
    every token); per group it is 1.85 GB once decoding (1.79 GB before vLLM's 8 padding
    layers were counted: its 52 sliding layers hold blocks as 60,
    sim.sizing.layer_padding). The peak is the prompt's second 8,192-token chunk, tokens
    [8192, 16370): the sliding layers keep every block from token 8192 - 1024 + 1 = 7169
    on (vLLM V1's remove_skipped_blocks), blocks 448..1023 = 576 blocks of 16 x 60 layers
    x 8,192 B, beside the table's 1,024 blocks of 16 x 81,920 B: 5.872 GB."""
    run = run_scenario(_scenario(tmp_path, "gemma-3-27b", 16370, 14))
    peak = run.summary["peak_allocated_bytes"]
    every = 16384 * run.summary["kv_bytes_per_token"]
    assert every == pytest.approx(8.32e9, rel=1e-3)
    assert peak == 1024 * 16 * 81920 + 576 * 16 * 60 * 8192 == 5_872_025_600
    mem = run.memory
    decoding = mem.allocated_bytes[mem.t_s > mem.t_s[mem.allocated_bytes.idxmax()]]
    assert decoding.max() == pytest.approx(1.853e9, rel=1e-3)


def _shared(tmp_path, model: str) -> str:
    """Four requests, one after another, sharing a 2,048-token prefix, on a radix cache."""
    doc = yaml.safe_load(open(_scenario(tmp_path, model, 2100, 4)))
    doc["allocator"] = {"kind": "radix", "block_size": B}
    doc["workload"]["requests"] = [{"count": 4, "at_s": 0.0, "interval_s": 5.0,
                                    "prompt_tokens": 2100, "output_tokens": 4,
                                    "shared_prefix_tokens": 2048}]  # fmt: skip
    path = tmp_path / f"{model}-shared.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_state_space_model_gets_no_prefix_hit(tmp_path):
    """qwen3-next: its gated-DeltaNet group has no saved state at any block boundary (vLLM
    without Mamba prefix caching), so the hybrid rule stops every hit and says which group."""
    s = run_scenario(_shared(tmp_path, "qwen3-next-80b-a3b"),
                     **{"engine.check_invariants": True}).summary  # fmt: skip
    (group,) = [g.name for g in load_model("qwen3-next-80b-a3b").kv_groups()
                if g.kind == "linear_attention"]  # fmt: skip
    assert s["prefix_hit_limited_by"] == group
    assert s["prefix_hit_rate"] == 0.0


def test_windowed_model_keeps_its_hits(tmp_path):
    """gpt-oss: the window's blocks are cached with the full layers', so the table's hit
    stands (3 of 4 requests hit the 2,048 shared tokens: 128 blocks of 16)."""
    s = run_scenario(_shared(tmp_path, "gpt-oss-120b"),
                     **{"engine.check_invariants": True}).summary  # fmt: skip
    assert "prefix_hit_limited_by" not in s
    assert s["prefix_hit_rate"] == pytest.approx(3 * 2048 / (4 * 2100))


@pytest.mark.parametrize("model", ["gemma-3-27b", "llama-3.1-8b"])
def test_memory_parquet_splits_the_table_from_the_side_groups(model, tmp_path):
    """memory.parquet's side_kv_bytes: the windowed groups' blocks; the rest of allocated
    is the block table's, ceil(S/B) blocks of the full layers at the 16,384-token peak."""
    run = run_scenario(_scenario(tmp_path, model, 16370, 14))
    mem = run.memory
    peak = mem.loc[mem.allocated_bytes.idxmax()]
    g = kv_groups(load_model(model), 1, 1)
    if not g.hybrid:
        assert (mem.side_kv_bytes == 0).all()
        return
    table = peak.allocated_bytes - peak.side_kv_bytes
    assert table == 16384 // B * B * g.table_bytes_per_token
    # the second prefill chunk, tokens [8192, 16370): the window keeps blocks from token
    # 8192 - 1024 + 1 = 7169 (block 448) to block 1023 (vLLM V1): 576 blocks
    per_block = B * g.side[0].bytes_per_token
    assert peak.side_kv_bytes == 576 * per_block
    # once decoding: the window's 64 blocks, or 65 while the allocator is told of tokens
    # a block late (deferred appends), rounded up to one table block
    last = mem.iloc[-2]  # the last step's row (the final row is after the free)
    assert 64 * per_block <= last.side_kv_bytes <= 65 * per_block + B * g.table_bytes_per_token
    assert ((mem.side_kv_bytes >= 0) & (mem.side_kv_bytes <= mem.allocated_bytes)).all()


@pytest.mark.parametrize("model", ["gemma-3-27b", "qwen3-next-80b-a3b"])
def test_contiguous_oracle_reserves_per_group(model, tmp_path):
    """A contiguous buffer reserved for the exact final length (Orca-Oracle) holds the full
    layers' 16,384 tokens plus its side groups' peak: the plan's bytes, within one slot."""
    doc = yaml.safe_load(open(_scenario(tmp_path, model, 16370, 14)))
    doc["allocator"] = {"kind": "contiguous", "reservation": "oracle"}
    path = tmp_path / f"{model}-oracle.yaml"
    path.write_text(yaml.safe_dump(doc))
    peak = run_scenario(str(path), **{"engine.check_invariants": True}).summary[
        "peak_allocated_bytes"]  # fmt: skip
    plan = kv_bytes_for_context(load_model(model), 16384)
    g = kv_groups(load_model(model), 1, 1)
    assert plan <= peak <= plan + g.table_bytes_per_token


def test_one_request_peak_matches_plan_with_saved_states(tmp_path, run_cli):
    """``mamba_cache_mode: all`` (a radix cache, as vLLM runs a Mamba model with prefix
    caching) against ``kvsim plan --mamba-cache-mode all``: nemotron-h-8b at 8,192 tokens
    holds 13 blocks of 640, each with the 24 state layers' saved states in pages padded to
    the attention page (640 x 4,096 B); the plan's attention KV is exact (8,192 tokens),
    the run's is whole blocks, so they differ by the last block's 128 empty slots."""
    code, out, _ = run_cli("kvsim plan --model nemotron-h-8b --gpu h200-141gb --num-gpus 1 "
                           "--context 8192 --mamba-cache-mode all --json")  # fmt: skip
    assert code == 0
    d = json.loads(out)
    (ctx,) = d["contexts"]
    assert (d["block_size_tokens"], d["mamba_cache_mode"]) == (640, "all")
    assert ctx["state_bytes_per_trajectory"] == 13 * 24 * 640 * 4_096
    plan = ctx["peak_kv_bytes_per_trajectory"]
    doc = yaml.safe_load(open(_scenario(tmp_path, "nemotron-h-8b", 8180, 12)))
    doc["allocator"]["kind"] = "radix"
    doc["model"] = {"profile": "nemotron-h-8b", "mamba_cache_mode": "all"}
    path = tmp_path / "all.yaml"
    path.write_text(yaml.safe_dump(doc))
    s = run_scenario(str(path), **{"engine.check_invariants": True}).summary
    assert s["requests_completed"] == 1
    assert s["peak_allocated_bytes"] == plan + (13 * 640 - 8192) * 16_384


def test_plan_refuses_a_mode_it_does_not_plan(run_cli):
    code, _, err = run_cli("kvsim plan --model nemotron-h-8b --gpu h200-141gb --num-gpus 1 "
                           "--context 8192 --mamba-cache-mode align")  # fmt: skip
    assert code == 2 and "--mamba-cache-mode: 'align' is not one of none, all" in err
    assert "Traceback" not in err
