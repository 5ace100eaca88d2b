"""A KV state that tensor parallelism replicates (an MLA latent whole on every rank, KV
heads copied when TP > H_kv) through the engine's pauses and ``kvsim breakeven``.

Each rank holds, and offloads, its own copy (vLLM's OffloadingConnector: a host block is
``page_size_bytes x KV tensors x world_size``; docs/pause_policies.md, "What host DRAM and
NVMe store"): the HBM a hold blocks, the bytes written to host DRAM or NVMe, the drive
time and the room a pool needs are all one rank's bytes times the GPUs, and
``kvsim breakeven``'s ``hold_gb_s`` prices the same bytes as the engine's
``paused_hbm_gb_s``.
"""

from __future__ import annotations

import math

import pytest

from sim.policy.facts import facts_for_context
from sim.profiles.registry import load_accelerator, load_model
from sim.run import run_scenario
from sim.sizing.breakeven import BreakEvenInputs, break_even

TOKENS = 16384
WAIT_S = 10.0
LINK = 50e9  # per GPU, one way, no overhead
TP = 8
# DeepSeek-V3: latent kv_lora_rank 512 + rope 64 = 576 elements x 2 B (bf16) x 61 layers
MLA_RANK_BPT = 576 * 2 * 61  # 70,272 B per token on every rank
MLA_RANK = TOKENS * MLA_RANK_BPT  # 1,151,336,448 B on each rank
MLA_ALL = TP * MLA_RANK  # 9,210,691,584 B over the 8 GPUs
NVME_BW = 8 * 7.0e9  # DGX H200: 8 drives x 7 GB/s


def doc(model: str = "deepseek-v3", **pause) -> dict:
    """The probe's scenario: one trajectory, a 16,384-token first turn, one 10 s pause."""
    return {
        "schema_version": 1,
        "name": "replicated_offload",
        "seed": 0,
        "model": model,
        "hardware": {"accelerator": "h200-141gb", "tp": TP, "node": "dgx-h200",
                     "host_link_bw_bytes_per_s": LINK, "host_link_overhead_s": 0.0},
        "cost": {"mfu_prefill": 0.45, "attention_flops": False, "allreduce": False},
        "allocator": {"kind": "paged", "block_size": 64},
        "scheduler": {"kind": "vllm_v1", "max_num_batched_tokens": 8192},
        "pause_policy": {"kind": "hold", "predictor": {"mode": "oracle"}, **pause},
        "workload": {"kind": "agent", "num_trajectories": 1, "arrival": {"kind": "fixed"},
                     "turns": 2, "system_prompt_tokens": 0, "tool_tokens": 0,
                     "task_tokens": TOKENS, "output_tokens": 1, "observation_tokens": 256,
                     "pause_s": WAIT_S},
        "engine": {"check_invariants": True},
    }  # fmt: skip


def one_pause(source: dict, **overrides):
    r = run_scenario(source, **overrides)
    assert len(r.pauses) == 1
    return r, r.pauses.iloc[0]


def close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def be(model: str, wait_s: float | None = WAIT_S):
    """``kvsim breakeven --model M --num-gpus 8 --context 16384 --link-gb-per-s 50 --wait 10``."""
    h200 = load_accelerator("h200-141gb")
    return break_even(BreakEvenInputs(
        model=load_model(model), context_tokens=TOKENS, link_bw_bytes_per_s=LINK,
        prefill_flops_per_s=0.45 * h200.peak_bf16_flops_per_s * TP, tp=TP, wait_s=wait_s,
    ))  # fmt: skip


def test_mla_hold_prices_every_rank_and_breakeven_agrees():
    """Hold: 9,210,691,584 B x 10 s = 92.10691584 GB*s in the engine and in breakeven
    (one copy, 1,151,336,448 B, would be 11.51336448: 8x too little)."""
    r, p = one_pause(doc())
    assert p.decision == "hold" and p.tokens == TOKENS
    assert p.state_bytes == MLA_ALL == 9_210_691_584
    assert close(p.paused_hbm_gb_s, 92.10691584)
    b = be("deepseek-v3")
    assert b.kv_bytes == b.kv_bytes_per_gpu == MLA_RANK == 1_151_336_448
    assert b.kv_bytes_all_gpus == MLA_ALL
    assert close(b.hold_gb_s, 92.10691584)
    assert close(b.hold_gb_s, p.paused_hbm_gb_s)
    assert close(r.summary["paused_hbm_gb_s"], b.hold_gb_s)


def test_mla_offload_nvme_writes_every_rank():
    """NVMe: 9,210,691,584 B written; one way = drives 9,210,691,584 / 56e9 = 164.477 ms
    then the link leg 1,151,336,448 / 50e9 = 23.027 ms: 187.504 ms."""
    _, p = one_pause(doc(), **{"pause_policy.kind": "offload_nvme"})
    assert p.decision == "offload_nvme"
    assert p.bytes_offloaded_nvme == MLA_ALL and p.bytes_reloaded_nvme == MLA_ALL
    one_way = 9_210_691_584 / 56e9 + 1_151_336_448 / 50e9
    assert close(p.copy_out_done_s - p.start_s, one_way)
    assert 0.18750 < one_way < 0.18751
    assert close(p.copy_in_done_s - p.reload_start_s, one_way)


@pytest.mark.parametrize(
    ("pool_bytes", "decision", "reason"),
    [(2e9, "hold", "host DRAM full: hold"),  # 2 GB < 9.21 GB: every rank's copy
     (9.3e9, "offload_host", "always offload to host")],  # fmt: skip
)
def test_mla_host_pool_needs_every_rank(pool_bytes, decision, reason):
    """Host DRAM: the pause needs 9,210,691,584 B of frames, so a 2 GB pool refuses it
    and a 9.3 GB one takes it; the copy-out is the link leg, 1,151,336,448 / 50e9 =
    23.027 ms (every rank moves its own latent at once)."""
    sets = {"pause_policy.kind": "offload_host", "hardware.host_kv_pool_bytes": pool_bytes}
    _, p = one_pause(doc(), **sets)
    assert (p.decision, p.moved_to, p.reason) == (decision, decision, reason)
    if decision == "offload_host":
        assert p.bytes_offloaded_host == MLA_ALL
        assert close(p.copy_out_done_s - p.start_s, 1_151_336_448 / 50e9)
    else:
        assert p.bytes_offloaded_host == 0.0


def test_replicated_kv_heads_hold_and_breakeven_agree():
    """TP 8 > qwen3-30b-a3b's 4 KV heads: each rank keeps one whole head, so a token is
    2 x 1 x 128 x 2 B x 48 layers = 24,576 B per rank, 196,608 B over 8 GPUs (twice the
    model's 98,304); 16,384 tokens hold 3,221,225,472 B, 10 s = 32.21225472 GB*s."""
    _, p = one_pause(doc("qwen3-30b-a3b"))
    assert p.state_bytes == 16384 * 8 * 24_576 == 3_221_225_472
    assert close(p.paused_hbm_gb_s, 32.21225472)
    b = be("qwen3-30b-a3b")
    assert b.kv_bytes == 16384 * 98_304 and b.kv_bytes_per_gpu == 16384 * 24_576
    assert b.kv_bytes_all_gpus == 3_221_225_472
    assert close(b.hold_gb_s, 32.21225472) and close(b.hold_gb_s, p.paused_hbm_gb_s)


def test_facts_for_context_total_is_every_rank():
    """The analytic facts a policy sees match the engine's: 9,210,691,584 B in total, so
    a 9.2 GB host pool does not fit the pause and 9.3 GB does."""
    f = facts_for_context(load_model("deepseek-v3"), TOKENS, tp=TP, link_bw_bytes_per_s=LINK,
                          prefill_flops_per_s=1e15, predicted_wait_s=WAIT_S,
                          host_free_bytes=9.2e9)  # fmt: skip
    assert f.state_bytes_per_gpu == MLA_RANK and f.state_bytes_total == MLA_ALL
    assert not f.host_fits()
    assert f.hold_byte_s(WAIT_S) == MLA_ALL * WAIT_S
    big = facts_for_context(load_model("deepseek-v3"), TOKENS, tp=TP, link_bw_bytes_per_s=LINK,
                            prefill_flops_per_s=1e15, predicted_wait_s=WAIT_S,
                            host_free_bytes=9.3e9)  # fmt: skip
    assert big.host_fits()
