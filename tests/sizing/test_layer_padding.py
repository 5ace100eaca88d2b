"""vLLM's KV cache group padding (sim.sizing.layer_padding), worked by hand.

Expected numbers follow ``_get_kv_cache_groups_uniform_page_size`` (group size: the fewest
layers of one spec, the most when under 1.5x the fewest; ``cdiv(n, size)`` groups a spec,
group i taking ``layers[i::groups]``) and ``get_kv_cache_config_from_groups`` (a worker's
tensors: its largest group's layers there).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.profiles import load_model
from sim.sizing.group_demand import kv_groups
from sim.sizing.kv import model_layer_padding, stage_layer_padding
from sim.sizing.layer_padding import vllm_layer_padding, vllm_stage_padding


def test_gemma_pads_its_sliding_layers_to_sixty():
    p = model_layer_padding(load_model("gemma-3-27b"))
    assert p.group_size_layers == 10
    assert p.padded_layers == {"sliding": 60, "full": 10}
    assert (p.padding_layers("sliding"), p.padding_layers("full"), p.total_padding_layers) == (8, 0, 8)


def test_under_one_and_a_half_uses_the_larger_count():
    # vLLM's own example: gpt-oss-20b + an EAGLE layer, 12 sliding + 13 full -> (13, 13)
    p = vllm_layer_padding({"sliding": 12, "full": 13})
    assert (p.group_size_layers, p.padded_layers) == (13, {"sliding": 13, "full": 13})
    # 10 + 15 is not under 1.5x: groups of 10, the 15 padded to 20
    assert vllm_layer_padding({"a": 10, "b": 15}).padded_layers == {"a": 10, "b": 20}


def test_one_spec_is_never_padded():
    assert vllm_layer_padding({"full": 7}).padded_layers == {"full": 7}
    assert vllm_layer_padding({"full": 7, "sliding": 0}).padded_layers == {"full": 7, "sliding": 0}


def test_models_without_padding_at_one_stage():
    for name in ("gpt-oss-20b", "gpt-oss-120b", "llama-4-scout-17b-16e", "qwen3-next-80b-a3b",
                 "nemotron-h-8b", "deepseek-v3.2", "llama-3.1-8b"):  # fmt: skip
        assert model_layer_padding(load_model(name)).total_padding_layers == 0, name


def test_an_uneven_pipeline_stage_pads():
    # gpt-oss-120b, 36 alternating layers at PP 4: 9 a stage, one group of 18 per spec;
    # a stage with 5 sliding + 4 full keeps 5 tensors, so both specs cost 5
    stages = stage_layer_padding(load_model("gpt-oss-120b"), 4)
    assert [s.padded_layers for s in stages] == [{"sliding": 5, "full": 5}] * 4
    assert sorted(sum(s.layers.values()) for s in stages) == [9] * 4


def test_strided_groups_spread_over_stages():
    # vLLM's comment: stage 0 full.0 sw.0 sw.1, stage 1 full.1 sw.2 sw.3 -> groups (full.0,
    # full.1), (sw.0, sw.2), (sw.1, sw.3): one layer of each group per stage, no padding
    specs = [("full",), ("sliding",), ("sliding",), ("full",), ("sliding",), ("sliding",)]
    stages = vllm_stage_padding(specs, [3, 3])
    assert [s.padded_layers for s in stages] == [{"full": 1, "sliding": 2}] * 2


@settings(max_examples=80, deadline=None)
@given(
    kinds=st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=60),
    pp=st.integers(1, 4),
)
def test_padding_never_drops_a_layer(kinds, pp):
    pp = min(pp, len(kinds))
    base, extra = divmod(len(kinds), pp)
    sizes = [base + (i < extra) for i in range(pp)]
    stages = vllm_stage_padding([(k,) for k in kinds], sizes)
    for s in stages:
        for name, n in s.layers.items():
            assert s.padded_layers[name] >= n
    whole = vllm_stage_padding([(k,) for k in kinds], [len(kinds)])[0]
    assert whole.layers == {k: kinds.count(k) for k in set(kinds)}
    size = whole.group_size_layers
    assert all(n % size == 0 for n in whole.padded_layers.values()) or len(set(kinds)) == 1


def test_an_eagle_layer_joins_the_targets_full_spec_before_the_group_size():
    """vLLM's own example: gpt-oss-20b + an EAGLE layer is 12 sliding + 13 full, groups of
    13, so the target's sliding layers hold blocks as 13 (2,048 B per token per layer, bf16);
    gemma-3-27b + EAGLE: 52 + 11, groups of 11, sliding as 55 (not 60); nemotron-h-8b's 24
    Mamba layers as 25 (groups of 4 + 1 = 5). The drafter's own layer stays out of the
    target's table (the engine charges it as ``draft``)."""
    per_layer = 2 * 8 * 64 * 2  # gpt-oss-20b: 8 KV heads x 64, bf16
    plain, eagle = (kv_groups(load_model("gpt-oss-20b"), draft_layers=d) for d in (0, 1))
    assert [g.bytes_per_token for g in plain.side] == [12 * per_layer]
    assert [g.bytes_per_token for g in eagle.side] == [13 * per_layer]
    assert eagle.table_bytes_per_token == plain.table_bytes_per_token == 12 * per_layer
    assert eagle.all_bytes_per_token == plain.all_bytes_per_token  # F1: real layers only
    gemma = kv_groups(load_model("gemma-3-27b"), draft_layers=1)
    assert [g.bytes_per_token for g in gemma.side] == [55 * 8192]
    nemotron = load_model("nemotron-h-8b")
    one_state = kv_groups(nemotron).side[0].state_bytes / 24
    assert kv_groups(nemotron, draft_layers=1).side[0].state_bytes == 25 * one_state
    # a dense or MLA + indexer model (61 + 61 -> 62 + 62) gains no padding
    for name in ("llama-3.1-8b", "deepseek-v3.2"):
        m = load_model(name)
        assert kv_groups(m, draft_layers=1) == kv_groups(m)
