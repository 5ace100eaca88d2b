"""Layer groups in model profiles: validation, the groups old profiles map to, the KV dtype key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ConfigError
from sim.profiles import available, load_model
from sim.scenario import load_scenario, resolve
from sim.sizing import kv_bytes_for_context, kv_bytes_per_token, kv_bytes_per_token_per_gpu
from sim.sizing.kv import model_layer_padding, stage_layer_padding
from sim.units import dtype_bytes

LEGACY = [n for n in available("model") if load_model(n).layer_groups is None]
HYBRID = ["qwen3-next-80b-a3b", "llama-4-scout-17b-16e", "deepseek-v3.2", "nemotron-h-8b"]


def test_nvfp4_is_four_bits_plus_one_fp8_scale_per_16_values():
    assert dtype_bytes("nvfp4") == (4 + 8 / 16) / 8 == 0.5625


@pytest.mark.parametrize("name", HYBRID)
def test_hybrid_profiles_state_their_groups(name):
    model = load_model(name)
    assert model.layer_groups is not None
    per_layer = model.layer_group_names()
    assert len(per_layer) == model.num_layers
    for g in model.kv_groups():
        assert any(g.name in layer for layer in per_layer)


def test_group_layer_counts_follow_the_config():
    def count(name, group):
        return sum(group in layer for layer in load_model(name).layer_group_names())

    assert (count("qwen3-next-80b-a3b", "full"), count("qwen3-next-80b-a3b", "deltanet")) == (12, 36)
    assert (count("llama-4-scout-17b-16e", "full"), count("llama-4-scout-17b-16e", "chunked")) == (12, 36)
    assert (count("deepseek-v3.2", "mla"), count("deepseek-v3.2", "indexer")) == (61, 61)
    # "M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M*-M-M-M-M-M-": 24 M, 4 *, 24 MLP-only
    nemo = load_model("nemotron-h-8b").layer_group_names()
    assert (count("nemotron-h-8b", "mamba"), count("nemotron-h-8b", "attention")) == (24, 4)
    assert sum(layer == () for layer in nemo) == 24
    assert [i for i, layer in enumerate(nemo) if layer == ("attention",)] == [7, 18, 29, 40]


def test_old_profiles_map_to_one_or_two_groups():
    assert [g.name for g in load_model("llama-3.1-70b").kv_groups()] == ["full"]
    assert [g.kind for g in load_model("deepseek-v3").kv_groups()] == ["mla"]
    gemma = load_model("gemma-3-27b")
    assert [(g.name, g.kind) for g in gemma.kv_groups()] == [
        ("full", "full"),
        ("sliding", "sliding_window"),
    ]
    assert [names[0] for names in gemma.layer_group_names()] == gemma.layer_kinds()


def _old_kv_bytes(model, tokens, tp, pp, per_gpu):
    """The pre-group formula, written out: every layer the same shape, sliding capped."""
    b = dtype_bytes(model.kv_dtype)
    if model.mla is not None:
        per_layer = model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    elif per_gpu:
        per_layer = 2 * max(1, model.num_kv_heads // tp) * model.head_dim
    else:
        per_layer = 2 * model.num_kv_heads * model.head_dim
    win = model.sliding_window.window_tokens if model.sliding_window else None
    held = [tokens if k == "full" else min(tokens, win) for k in model.layer_kinds()]
    if not per_gpu:
        return sum(held) * per_layer * b
    base, extra = divmod(model.num_layers, pp)
    sizes = [base + (i < extra) for i in range(pp)]
    starts = [sum(sizes[:i]) for i in range(pp)]
    return max(sum(held[s : s + n]) * per_layer * b for s, n in zip(starts, sizes, strict=True))


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(LEGACY),
    tokens=st.integers(1, 300_000),
    tp=st.sampled_from([1, 2, 4, 8]),
    pp=st.integers(1, 4),
)
def test_old_profiles_size_as_before(name, tokens, tp, pp):
    model = load_model(name)
    if model.num_q_heads % tp or (model.num_kv_heads % tp and tp % model.num_kv_heads):
        return  # a layout the model refuses, as before
    # vLLM's padding layers (sim.sizing.layer_padding) add to what the old formula gave:
    # gemma-3-27b always (52 sliding in groups of 10), others on an uneven PP split
    whole_pad = model_layer_padding(model).total_padding_layers
    stage_pad = any(s.total_padding_layers for s in stage_layer_padding(model, pp))
    old_whole = _old_kv_bytes(model, tokens, 1, 1, False)
    got_whole = kv_bytes_for_context(model, tokens)
    assert got_whole == old_whole if not whole_pad else got_whole > old_whole
    got = kv_bytes_for_context(model, tokens, tp, pp, per_gpu=True)
    old = _old_kv_bytes(model, tokens, tp, pp, True)
    assert got == old if not stage_pad else got > old
    per_token = kv_bytes_per_token_per_gpu(model, tp, pp)
    assert per_token == _old_kv_bytes(model, 1, tp, pp, True)  # windows ignored per token


def _bad(tmp_path, extra: str) -> str:
    src = (available("model")["llama-3.1-8b"]).read_text() + extra
    d = tmp_path / "models"
    d.mkdir(exist_ok=True)
    (d / "bad.yaml").write_text(src)
    with pytest.raises(ConfigError) as err:
        load_model("bad", [tmp_path])
    msg = str(err.value)
    assert "\n" not in msg and "bad.yaml" in msg
    return msg


GROUP = "layer_groups:\n  - {name: a, kind: full, num_kv_heads: 8, head_dim: 128}\n"


@pytest.mark.parametrize(
    "extra,needle",
    [
        ("layer_groups:\n  - {name: s, kind: sliding_window, num_kv_heads: 8, head_dim: 128}\n",
         "window_tokens is required"),
        (GROUP + "  - {name: b, kind: full, num_kv_heads: 8, head_dim: 128}\n",
         "layer_pattern is required"),
        (GROUP + "layer_pattern: [a, c]\n", "no layer group; valid: a, none"),
        (GROUP + "  - {name: a, kind: full, num_kv_heads: 8, head_dim: 128}\nlayer_pattern: [a]\n",
         "unique"),
        (GROUP + "  - {name: i, kind: indexer, head_dim: 128, alongside: z}\n",
         "'i' has no layer"),
        (GROUP + "  - {name: m, kind: mamba, conv_kernel: 4, conv_channels: 8, state_heads: 2,"
         " state_head_dim: 4, state_dim: 4, kv_dtype: fp8}\nlayer_pattern: [a, m]\n",
         "kv_dtype"),
        ("layer_pattern: [a]\n", "layer_pattern needs layer_groups"),
        ("layer_groups:\n  - {name: m, kind: mla, kv_lora_rank: 512, qk_rope_head_dim: 64}\n",
         "must match the model's 'mla' block"),
        ("layer_groups:\n  - {name: a, kind: rnn}\n", "kind"),
    ],
)  # fmt: skip
def test_bad_groups_are_one_line_errors(tmp_path, extra, needle):
    assert needle in _bad(tmp_path, extra)


def test_kv_dtype_scenario_key_selects_fp8_and_nvfp4():
    base = {
        "schema_version": 1,
        "name": "t",
        "hardware": {"accelerator": "h200-141gb"},
        "workload": {
            "kind": "requests",
            "requests": [{"count": 1, "prompt_tokens": 100, "output_tokens": 10}],
        },
    }
    per_token = {}
    for dtype in (None, "fp8", "nvfp4"):
        model = {"profile": "llama-3.1-8b"} | ({"kv_dtype": dtype} if dtype else {})
        per_token[dtype] = resolve(load_scenario({**base, "model": model})).kv_bytes_per_token_per_gpu
    # 32 layers x 2 x 8 heads x 128 = 65,536 elements per token
    assert per_token == {None: 65_536 * 2, "fp8": 65_536 * 1, "nvfp4": 65_536 * 0.5625}
    with pytest.raises(ConfigError, match="kv_dtype"):
        load_scenario({**base, "model": {"profile": "llama-3.1-8b", "kv_dtype": "fp6"}})


def test_group_dtype_pins_and_kv_dtype_sets_the_rest():
    v32 = load_model("deepseek-v3.2")
    # MLA latent 576 elements x 61 layers follows the KV dtype; the fp8 indexer keeps 132 B
    assert kv_bytes_per_token(v32) == 61 * (576 * 2 + 132)
    assert kv_bytes_per_token(v32, "fp8") == 61 * (576 + 132)
    assert kv_bytes_per_token(v32, "nvfp4") == 61 * (576 * 0.5625 + 132)
