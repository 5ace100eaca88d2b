"""kvsim's hybrid sizing against vLLM's own formulas, recomputed here (issue 27 item 4).

vLLM cannot run on this machine (``vllm==0.33.0`` pins ``torch==2.14.0``, a CUDA build,
plus flashinfer and nvidia-cutlass-dsl: docs/sizing.md), so its sizing code is not called.
Instead each figure is recomputed from the formulas as they read in vLLM's source, with the
models' config.json numbers written out (the profiles' comments), never through kvsim's
code, and compared with what kvsim computes:

* the attention block size and the padded state page: ``Platform._align_hybrid_block_size``
  (``vllm/platforms/interface.py``): without prefix caching ``align * cdiv(state_page,
  align * attn_page_1_token)``, with ``mamba_cache_mode == "all"`` ``chunk * cdiv(cdiv(
  state_page, attn_page_1_token), chunk)`` with ``chunk = lcm(mamba_chunk_size, align)``;
  ``align`` is ``max(16, block_size)`` (FlashAttention's ``MultipleOf(16)``);
* the KV cache groups and the pool's blocks: ``_get_kv_cache_groups_uniform_page_size``
  and ``get_kv_cache_config_from_groups`` (``vllm/v1/core/kv_cache_utils.py``):
  ``group_size`` = the fewest layers of one spec (the most, when those are under 1.5x the
  fewest), each spec's layers split into ``cdiv(n, group_size)`` groups, ``num_blocks =
  available_memory // page_size // group_size``;
* blocks per request of S tokens (``single_type_kv_cache_manager.py``): a full-attention
  group ``cdiv(S, B)``; a sliding window w ``cdiv(S, B) - (S - 1 - w + 1) // B`` once
  ``remove_skipped_blocks`` ran on the S - 1 computed tokens; a chunk c ``cdiv(S, B) -
  ((S - 1) // c * c) // B``; a Mamba group one block (``MambaSpec.block_size`` is
  ``max_model_len`` without prefix caching).

kvsim's counterparts: ``unify_pages`` (block size, padded page), the paged pool's blocks
``floor(M / (B x table_bytes_per_token))`` and per request ``cdiv(S, B) +
side_blocks(S, B)`` (``sim.sizing.group_demand``). They agree exactly on every model below.
vLLM's padding layers (a spec whose layers do not fill whole groups: gemma-3-27b's 52
sliding layers run as 6 groups of 10) are kvsim's too (``sim.sizing.layer_padding``).
Not compared: deepseek-v3.2 (its indexer page is vLLM's own packed format).
"""

from __future__ import annotations

import math

import pytest

from sim.profiles import load_model
from sim.sizing.group_demand import kv_groups
from sim.sizing.hybrid_pages import unify_pages

GB = 10**9


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def vllm_block_size(state_page: int, attn_1: int, block: int, chunk: int | None = None) -> int:
    """``_align_hybrid_block_size``: the attention block a state page forces."""
    align = max(16, block)
    if chunk is None:
        attn_block = align * cdiv(state_page, align * attn_1)
    else:
        c = math.lcm(chunk, align)
        attn_block = c * cdiv(cdiv(state_page, attn_1), c)
    return max(block, attn_block)


def vllm_groups(layers: dict[str, int]) -> tuple[int, dict[str, int]]:
    """``_get_kv_cache_groups_uniform_page_size``: group size and groups per spec."""
    lo, hi = min(layers.values()), max(layers.values())
    size = hi if hi < lo * 1.5 else lo
    return size, {k: cdiv(n, size) for k, n in layers.items()}


def vllm_request_blocks(kind: str, tokens: int, block: int, window: int = 0) -> int:
    """Blocks one group holds for a request of ``tokens`` (S - 1 computed)."""
    computed = tokens - 1
    if kind == "full":
        return cdiv(tokens, block)
    if kind == "sliding":
        return cdiv(tokens, block) - max(0, computed - window + 1) // block
    if kind == "chunked":
        return cdiv(tokens, block) - (computed // window * window) // block
    return 1  # a Mamba / linear-attention group: one state block


# model, tp, config figures (per GPU): attention bytes per token per layer, state page per
# layer (0: none), layers per spec, the non-full spec's kind and window, mamba chunk
CASES = [
    # Qwen3-Next: 2 KV heads x 256 x bf16; DeltaNet state 3 x 8,192 x 2 + 32 x 128 x 128 x 2
    ("qwen3-next-80b-a3b", 1, 2 * 2 * 256 * 2, 3 * 8192 * 2 + 32 * 128 * 128 * 2,
     {"full": 12, "state": 36}, "state", 0),
    # at TP 4: one KV head per rank (max(1, 2 // 4)), the state's heads and channels / 4
    ("qwen3-next-80b-a3b", 4, 2 * 1 * 256 * 2, (3 * 8192 * 2 + 32 * 128 * 128 * 2) // 4,
     {"full": 12, "state": 36}, "state", 0),
    # Nemotron-H 8B: 8 KV heads x 128; Mamba2 state 3 x 10,240 x 2 + 128 x 64 x 128 x 2
    ("nemotron-h-8b", 1, 2 * 8 * 128 * 2, 3 * 10240 * 2 + 128 * 64 * 128 * 2,
     {"full": 4, "state": 24}, "state", 0),
    ("nemotron-h-8b", 8, 2 * 1 * 128 * 2, (3 * 10240 * 2 + 128 * 64 * 128 * 2) // 8,
     {"full": 4, "state": 24}, "state", 0),
    # gpt-oss-20b: 12 sliding (128) + 12 full, 8 KV heads x 64
    ("gpt-oss-20b", 1, 2 * 8 * 64 * 2, 0, {"full": 12, "sliding": 12}, "sliding", 128),
    # Llama 4 Scout: 12 full + 36 chunked (8,192), 8 KV heads x 128
    ("llama-4-scout-17b-16e", 1, 2 * 8 * 128 * 2, 0, {"full": 12, "chunked": 36}, "chunked",
     8192),
    # gemma-3-27b: 10 full + 52 sliding (1,024), 16 KV heads x 128: groups of 10, so six
    # sliding groups, the last padded with 8 empty layers
    ("gemma-3-27b", 1, 2 * 16 * 128 * 2, 0, {"full": 10, "sliding": 52}, "sliding", 1024),
    ("gemma-3-27b", 2, 2 * 8 * 128 * 2, 0, {"full": 10, "sliding": 52}, "sliding", 1024),
]  # fmt: skip


@pytest.mark.parametrize(("model", "tp", "attn_1", "state", "layers", "other", "window"), CASES)
def test_block_size_and_padded_page_match_vllm(model, tp, attn_1, state, layers, other, window):
    pages = unify_pages(load_model(model), 16, tp)
    expected = vllm_block_size(state, attn_1, 16) if state else 16
    assert pages.block_size_tokens == expected
    assert pages.attention_page_bytes_per_token == attn_1
    if state:
        assert pages.state_page_bytes == state
        assert pages.state_page_padded_bytes == expected * attn_1  # mamba_page_size_padded


@pytest.mark.parametrize(("model", "tp", "attn_1", "state", "layers", "other", "window"), CASES)
@pytest.mark.parametrize("tokens", [1, 4096, 8191, 8192, 8193, 30000])
def test_pool_and_request_blocks_match_vllm(model, tp, attn_1, state, layers, other, window,
                                            tokens):  # fmt: skip
    m = load_model(model)
    block = unify_pages(m, 16, tp).block_size_tokens
    size, groups = vllm_groups(layers)
    assert groups["full"] == 1 and layers["full"] == size  # one full group of size layers
    available = 40 * GB
    vllm_pool = available // (block * attn_1) // size
    vllm_request = sum(n * vllm_request_blocks("full" if k == "full" else other, tokens, block,
                                               window) for k, n in groups.items())  # fmt: skip
    g = kv_groups(m, tp)
    assert math.floor(available / (block * g.table_bytes_per_token)) == vllm_pool
    assert cdiv(tokens, block) + g.side_blocks(tokens, block) == vllm_request


def test_gemma_request_blocks_at_a_full_window():
    """The figure the padding fixes: 6 sliding groups x 64 blocks = 384 blocks at a full
    1,024-token window (B 16), not 52 / 10 x 64 = 333."""
    size, groups = vllm_groups({"full": 10, "sliding": 52})
    assert (size, groups) == (10, {"full": 1, "sliding": 6})
    g = kv_groups(load_model("gemma-3-27b"))
    tokens = 4096
    assert groups["sliding"] * vllm_request_blocks("sliding", tokens, 16, 1024) == 6 * 64 == 384
    assert g.side_blocks(tokens, 16) == 384


@pytest.mark.parametrize(("tp", "expected"), [(1, 640), (8, 640)])
def test_all_mode_block_size_matches_vllm(tp, expected):
    # Nemotron-H under mamba_cache_mode all: aligned to the Mamba2 chunk (128)
    attn_1 = 2 * max(1, 8 // tp) * 128 * 2
    state = (3 * 10240 * 2 + 128 * 64 * 128 * 2) // tp
    assert vllm_block_size(state, attn_1, 16, chunk=128) == expected
    pages = unify_pages(load_model("nemotron-h-8b"), 16, tp, mamba_cache_mode="all")
    assert pages.block_size_tokens == expected


@pytest.mark.parametrize("tp", [1, 8])
def test_all_mode_request_bytes_match_vllm(tp):
    """Under ``all`` every group (attention and each Mamba group) holds ``cdiv(S, B)``
    blocks of the one page size (``MambaManager`` allocates a state block per block-table
    position; ``MambaSpec.page_size_bytes`` is ``page_size_padded``, the attention page):
    nemotron-h-8b at 8,192 tokens is 13 blocks of 640 in 1 + 6 groups of 4 layers. kvsim
    charges the same bytes: 13 table blocks of its bytes per token with saved states."""
    from sim.sizing.group_demand import with_saved_states

    attn_1 = 2 * max(1, 8 // tp) * 128 * 2
    block = 640
    size, groups = vllm_groups({"full": 4, "state": 24})
    assert (size, groups) == (4, {"full": 1, "state": 6})
    page = block * attn_1  # per layer per GPU; the padded state page equals it
    vllm_bytes = sum(groups.values()) * cdiv(8192, block) * size * page * tp
    pages = unify_pages(load_model("nemotron-h-8b"), 16, tp, mamba_cache_mode="all")
    assert pages.state_page_padded_bytes == page
    g = with_saved_states(kv_groups(load_model("nemotron-h-8b"), tp, num_gpus=tp), block, page)
    assert cdiv(8192, block) * block * g.table_bytes_per_token == vllm_bytes
    if tp == 1:  # 13 blocks x 7 groups x 4 layers x 2,621,440 B
        assert vllm_bytes == 954_204_160
