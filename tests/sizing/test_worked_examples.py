"""docs/sizing.md's worked examples, one per layer-group kind, computed by hand here.

Every expected number is written out from the formula and the config.json figures (bytes
per token per layer = 2 x H_kv x d_head x b; a window or chunk caps the tokens a layer
holds; a state layer holds (k - 1) x C conv + H x P x N recurrent elements per sequence),
never taken from the code. Concurrency is on one H200 holding a 100 GB KV pool:
floor(100e9 / bytes per sequence), TP 1.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import KvsimError
from sim.profiles import available, load_accelerator, load_model
from sim.sizing import (
    kv_breakdown,
    kv_bytes_for_context,
    kv_bytes_for_context_all_gpus,
    kv_bytes_per_token,
)
from sim.sizing.hybrid_pages import unify_pages
from sim.sizing.plan import PlanInputs, plan_capacity

POOL = 100e9  # bytes of KV pool on the one H200 of the examples
CONTEXTS = (8192, 32768, 131072)

# (model, kv dtype, bytes per token (every token group, windows ignored),
#  bytes per sequence at 8k / 32k / 128k)
EXAMPLES = {
    # full attention: 32 layers x 2 x 8 heads x 128 x 2 B
    "full": ("llama-3.1-8b", None, 32 * 2 * 8 * 128 * 2, [32 * 2 * 8 * 128 * 2 * s for s in CONTEXTS]),
    # sliding window 128 on 12 of 24 layers (2 x 8 x 64 x 2 = 2,048 B per token per layer)
    "sliding_window": (
        "gpt-oss-20b", None, 24 * 2048,
        [12 * 2048 * s + 12 * 2048 * 128 for s in CONTEXTS],
    ),
    # chunked local 8,192 on 36 of 48 layers (2 x 8 x 128 x 2 = 4,096 B per token per layer)
    "chunked_local": (
        "llama-4-scout-17b-16e", None, 48 * 4096,
        [12 * 4096 * s + 36 * 4096 * min(s, 8192) for s in CONTEXTS],
    ),
    # MLA: 61 layers x (512 + 64) x 2 B
    "mla": ("deepseek-v3", None, 61 * 576 * 2, [61 * 576 * 2 * s for s in CONTEXTS]),
    # MLA + indexer: + 61 x (128 fp8 + 4 B fp32 scale)
    "indexer": (
        "deepseek-v3.2", None, 61 * (1152 + 132), [61 * (1152 + 132) * s for s in CONTEXTS],
    ),
    # gated DeltaNet 36 of 48 layers: state (3 x 8,192 + 32 x 128 x 128) x 2 B per layer;
    # 12 full layers x 2 x 2 x 256 x 2 B
    "linear_attention": (
        "qwen3-next-80b-a3b", None, 12 * 2048,
        [12 * 2048 * s + 36 * (3 * 8192 + 32 * 128 * 128) * 2 for s in CONTEXTS],
    ),
    # Mamba2 24 layers: state (3 x 10,240 + 128 x 64 x 128) x 2 B; 4 attention x 4,096 B
    "mamba": (
        "nemotron-h-8b", None, 4 * 4096,
        [4 * 4096 * s + 24 * (3 * 10240 + 128 * 64 * 128) * 2 for s in CONTEXTS],
    ),
    # vLLM's padding layers: gemma-3-27b, 52 sliding (1,024) + 10 full, 2 x 16 x 128 x 2 =
    # 8,192 B per token per layer; groups of 10 layers, so the sliding layers hold blocks
    # as 6 x 10 = 60 (8 empty)
    "padding": (
        "gemma-3-27b", None, 62 * 8192,
        [10 * 8192 * s + 60 * 8192 * 1024 for s in CONTEXTS],
    ),
    # NVFP4 KV: 4.5 bits per element (4-bit values, one fp8 scale per 16)
    "nvfp4": (
        "llama-3.1-8b", "nvfp4", 32 * 2 * 8 * 128 * 4.5 / 8,
        [32 * 2 * 8 * 128 * 4.5 / 8 * s for s in CONTEXTS],
    ),
}  # fmt: skip

# the same sequences' concurrency on the 100 GB pool, divided out by hand
CONCURRENCY = {
    "full": [93, 23, 5],
    "sliding_window": [489, 123, 31],
    "chunked_local": [62, 35, 13],
    "mla": [173, 43, 10],
    "indexer": [155, 38, 9],
    "linear_attention": [415, 118, 30],
    "mamba": [537, 169, 45],
    "nvfp4": [331, 82, 20],
    "padding": [85, 31, 8],
}


# what a run (and vLLM) charges a hybrid with state layers (mamba_cache_mode none): whole
# blocks of the raised block size and each state layer's page padded to the attention
# page. qwen3-next TP 1: B = 544, a page 544 x 2,048 = 1,114,112 B, 36 of them; 24,576 B a
# token. nemotron-h-8b: B = 528, a page 528 x 4,096 = 2,162,688 B, 24 of them; 16,384 B.
CHARGED = {
    "linear_attention": [-(-s // 544) * 544 * 24_576 + 36 * 1_114_112 for s in CONTEXTS],
    "mamba": [-(-s // 528) * 528 * 16_384 + 24 * 2_162_688 for s in CONTEXTS],
}
CHARGED_CONCURRENCY = {"linear_attention": [393, 116, 30], "mamba": [525, 167, 45]}


def test_the_hand_numbers_agree_with_their_own_division():
    for kind, (_, _, _, per_seq) in EXAMPLES.items():
        assert [math.floor(POOL / b) for b in per_seq] == CONCURRENCY[kind], kind
    for kind, charged in CHARGED.items():
        assert [math.floor(POOL / b) for b in charged] == CHARGED_CONCURRENCY[kind], kind
    # nemotron-h-8b at 8,192 tokens: 16 blocks (8,448 tokens) + 24 padded pages
    assert CHARGED["mamba"][0] == 8448 * 16_384 + 51_904_512 == 190_316_544


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_bytes_per_token_and_per_sequence(kind):
    name, dtype, per_token, per_seq = EXAMPLES[kind]
    model = load_model(name)
    assert kv_bytes_per_token(model, dtype) == per_token
    assert [kv_bytes_for_context(model, s, kv_dtype=dtype) for s in CONTEXTS] == per_seq


@pytest.mark.parametrize("kind", sorted(EXAMPLES))
def test_concurrency_on_one_h200(kind):
    name, dtype, _, per_seq = EXAMPLES[kind]
    r = plan_capacity(
        PlanInputs(
            model=load_model(name),
            accelerator=load_accelerator("h200-141gb"),
            num_gpus=1,
            contexts=list(CONTEXTS),
            kv_dtype=dtype,
            params=1e9,
            weight_dtype="bf16",
            gpu_mem_bytes=102e9,  # 2 GB of weights leave the 100 GB pool
            gpu_memory_utilization=1.0,
        )
    )
    assert r.kv_pool_bytes_per_gpu == POOL
    assert [c.kv_bytes_per_trajectory for c in r.contexts] == per_seq
    # the hybrids with state layers: capacity over what a run charges (CHARGED), the
    # KV per trajectory the model's own bytes
    charged = CHARGED.get(kind, per_seq)
    assert [c.kv_bytes_per_trajectory_charged_per_gpu for c in r.contexts] == charged
    assert [c.max_concurrent for c in r.contexts] == CHARGED_CONCURRENCY.get(kind, CONCURRENCY[kind])


def test_padding_layers_are_their_own_figure():
    """gemma-3-27b: the 8 padding layers hold 8 x 1,024 x 8,192 = 67,108,864 B of every
    sequence past the window, named apart from the 52 real sliding layers' bytes."""
    r = plan_capacity(PlanInputs(model=load_model("gemma-3-27b"),
                                 accelerator=load_accelerator("h200-141gb"), num_gpus=1,
                                 contexts=[512, 8192]))  # fmt: skip
    assert (r.kv_cache_group_size_layers, r.padding_layers) == (10, 8)
    assert [c.padding_bytes_per_trajectory for c in r.contexts] == [8 * 512 * 8192, 67_108_864]
    sliding = {g.name: g for g in r.contexts[1].groups}["sliding"]
    assert (sliding.num_layers, sliding.padding_layers) == (52, 8)
    assert sliding.bytes == 60 * 1024 * 8192 and sliding.bytes_per_token == 52 * 8192
    assert any("adds 8 to the 52 'sliding' layers" in w for w in r.warnings)


def test_states_count_once_per_sequence_and_layer():
    """A DeltaNet layer holds 1,097,728 B whatever the context; 36 of them 39,518,208 B."""
    r = plan_capacity(
        PlanInputs(
            model=load_model("qwen3-next-80b-a3b"),
            accelerator=load_accelerator("h200-141gb"),
            num_gpus=4,
            contexts=[1, 131072],
        )
    )
    for c in r.contexts:
        assert c.state_bytes_per_trajectory == 36 * 1_097_728 == 39_518_208
        assert sum(g.bytes for g in c.groups) == c.kv_bytes_per_trajectory
        assert sum(g.bytes_per_gpu for g in c.groups) == c.kv_bytes_per_trajectory_per_gpu
    # TP 4: two KV heads replicate to one per rank; the state splits four ways
    per_gpu = 12 * 2 * 1 * 256 * 2 * 131072 + 39_518_208 / 4
    assert r.contexts[1].kv_bytes_per_trajectory_per_gpu == per_gpu
    # over the 4 GPUs: the replicated heads count twice, the state once
    assert r.contexts[1].kv_bytes_per_trajectory_all_gpus == 4 * per_gpu
    assert 4 * per_gpu - r.contexts[1].kv_bytes_per_trajectory == 12 * 2 * 2 * 256 * 2 * 131072


@pytest.mark.parametrize(
    "name,tp,block",
    [
        # attention page per token per GPU a, state page per GPU m: 16 x ceil(m / (16 a))
        ("qwen3-next-80b-a3b", 1, 16 * math.ceil(1_097_728 / (16 * 2 * 2 * 256 * 2))),  # 544
        ("qwen3-next-80b-a3b", 4, 16 * math.ceil(1_097_728 / 4 / (16 * 2 * 1 * 256 * 2))),  # 272
        ("nemotron-h-8b", 1, 16 * math.ceil(2_158_592 / (16 * 2 * 8 * 128 * 2))),  # 528
        ("nemotron-h-8b", 8, 16 * math.ceil(2_158_592 / 8 / (16 * 2 * 1 * 128 * 2))),  # 528
    ],
)
def test_hybrid_block_size_is_raised_as_vllm_does(name, tp, block):
    pages = unify_pages(load_model(name), 16, tp)
    assert (pages.block_size_tokens, pages.raised) == (block, True)
    assert pages.state_page_padded_bytes == block * pages.attention_page_bytes_per_token
    assert pages.state_page_padded_bytes >= pages.state_page_bytes


def test_block_size_kept_without_states_or_when_already_large():
    assert unify_pages(load_model("gemma-3-27b"), 16).block_size_tokens == 16
    # vLLM aligns to the block asked for when it exceeds 16: 1,024 already covers the state
    pages = unify_pages(load_model("qwen3-next-80b-a3b"), 1024)
    assert (pages.block_size_tokens, pages.raised) == (1024, False)


def test_plan_json_keeps_its_keys_and_adds_groups(run_cli):
    import json

    code, out, err = run_cli(
        "plan --model qwen3-next-80b-a3b --gpu h200-141gb --num-gpus 4 --context 32768 --json"
    )
    assert code == 0
    got = json.loads(out)
    ctx = got["contexts"][0]
    assert ctx["kv_bytes_per_trajectory"] == 12 * 2048 * 32768 + 36 * 1_097_728
    assert [g["name"] for g in ctx["groups"]] == ["full", "deltanet"]
    assert (got["requested_block_size_tokens"], got["block_size_tokens"]) == (16, 272)
    assert "raised to 272" in err


def test_plan_table_breaks_kv_down_by_group(run_cli):
    code, out, _ = run_cli("plan --model gpt-oss-20b --gpu h200-141gb --num-gpus 1 --context 8192")
    assert code == 0 and "KV by layer group" in out
    rows = [line for line in out.splitlines() if "sliding_window (128)" in line]
    # 12 sliding layers x 128 tokens x 2,048 B = 3,145,728 B = 0.003 GB
    cells = [c.strip() for c in rows[0].split("│") if c.strip()]
    assert len(rows) == 1
    assert cells[3:8] == ["12", "bf16", "128", f"{12 * 2048:,}", "-"]
    assert cells[8].startswith("0.003 GB")
    code, out, _ = run_cli("plan --model llama-3.1-8b --gpu h200-141gb --num-gpus 1 --context 8192")
    assert "KV by layer group" not in out  # one group would only repeat the totals


@settings(max_examples=80, deadline=None)
@given(
    name=st.sampled_from(sorted(available("model"))),
    tokens=st.integers(1, 400_000),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(1, 4),
    dtype=st.sampled_from([None, "fp8", "nvfp4"]),
)
def test_group_shares_sum_to_the_totals(name, tokens, tp, pp, dtype):
    model = load_model(name)
    try:
        per_gpu = kv_bytes_for_context(model, tokens, tp, pp, dtype, per_gpu=True)
    except KvsimError:
        return  # a layout the model refuses
    groups = kv_breakdown(model, tokens, tp, pp, dtype)
    assert math.isclose(sum(g.bytes for g in groups), kv_bytes_for_context(model, tokens, kv_dtype=dtype))
    assert math.isclose(sum(g.bytes_per_gpu for g in groups), per_gpu)
    # a longer context never holds less; TP replication never makes the replica hold less
    assert kv_bytes_for_context(model, tokens + 1, kv_dtype=dtype) >= kv_bytes_for_context(
        model, tokens, kv_dtype=dtype
    )
    all_gpus = kv_bytes_for_context_all_gpus(model, tokens, tp, pp, dtype)
    assert all_gpus >= kv_bytes_for_context(model, tokens, kv_dtype=dtype) * (1 - 1e-12)


def test_plan_charges_nemotron_as_a_run_and_vllm_do():
    """The user trial's case: nemotron-h-8b, one H100, 1,024 tokens. A run charges 2
    blocks of 528 tokens x 16,384 B (4 attention layers x 4,096) + 24 Mamba-2 pages padded
    to 2,162,688 B = 69,206,016 B: 61,309,411,328 / 69,206,016 -> 885 (vLLM: 7,087
    blocks / 8 per sequence = 885), where the unpadded 68,583,424 B gave 893."""
    r = plan_capacity(PlanInputs(model=load_model("nemotron-h-8b"),
                                 accelerator=load_accelerator("h100-sxm-80gb"), num_gpus=1,
                                 contexts=[1024], gpu_memory_utilization=0.9))  # fmt: skip
    (c,) = r.contexts
    assert r.kv_pool_bytes_per_gpu == 61_309_411_328
    assert c.kv_bytes_per_trajectory == 1024 * 16_384 + 24 * 2_158_592 == 68_583_424
    assert c.kv_bytes_per_trajectory_charged_per_gpu == 2 * 528 * 16_384 + 24 * 2_162_688
    assert c.kv_bytes_per_trajectory_charged_per_gpu == 69_206_016
    assert c.max_concurrent == 61_309_411_328 // 69_206_016 == 885
    assert any("counted in the capacity above" in w for w in r.warnings)
