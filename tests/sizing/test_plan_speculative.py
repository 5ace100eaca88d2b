"""``kvsim plan`` with a speculative drafter (h114): the drafter's KV per token, its weights
out of the pool, ``k`` lookahead slots per trajectory and, for EAGLE / MTP, its layer in
vLLM's KV cache grouping, by the rule a run resolves (``sim.sizing.speculative``).

Every expected figure is derived by hand from the profiles' numbers (stated in each test):
Llama-3.1-8B 32 layers x 2 x 8 KV heads x 128 x 2 B (bf16) = 131,072 B per token, 8.03e9
bf16 parameters; Llama-3.1-70B 80 layers of the same per-layer geometry (4,096 B), 70.55e9
parameters; gpt-oss-20b 12 sliding (window 128) + 12 full layers of 2 x 8 x 64 x 2 =
2,048 B; one H200 0.9 x 150,754,820,096 B = 135,679,338,086.4 B.
"""

from __future__ import annotations

import math

import pytest
import yaml

from sim.errors import KvsimError
from sim.profiles import load_accelerator, load_model
from sim.run import run_scenario
from sim.scenario import load_scenario
from sim.scenario.resolve import resolve
from sim.sizing.plan import PlanInputs, plan_capacity
from sim.sizing.speculative import drafter_layer_padding, drafter_padding_layers, drafter_sizing


def one_request_doc(model: str, prompt: int, output: int) -> dict:
    """One request of ``prompt`` + ``output`` tokens on one H200, a 40 GB paged pool of
    16-token blocks (``tests/engine/engine_helpers.one_request_doc``'s scenario)."""
    return {
        "schema_version": 1, "name": "one_request", "seed": 0, "model": model,
        "hardware": {"accelerator": "h200-141gb", "tp": 1, "kv_pool_bytes_per_gpu": 40e9},
        "allocator": {"kind": "paged", "block_size": 16},
        "scheduler": {"kind": "vllm_v1"},
        "workload": {"kind": "requests", "requests": [
            {"count": 1, "at_s": 0.0, "prompt_tokens": prompt, "output_tokens": output}]},
    }  # fmt: skip

H200_AT_09 = 0.9 * 150_754_820_096
LLAMA8_LAYER = 2 * 8 * 128 * 2  # 4,096 B per token per layer
LLAMA8_TOKEN = 32 * LLAMA8_LAYER  # 131,072
LLAMA8_WEIGHTS = 8.03e9 * 2


def _plan(model: str, contexts, output: int = 0, **kw):
    kw.setdefault("num_gpus", 1)
    return plan_capacity(PlanInputs(
        model=load_model(model), accelerator=load_accelerator("h200-141gb"),
        contexts=list(contexts), output_tokens=output, gpu_memory_utilization=0.9, **kw,
    ))  # fmt: skip


def test_llama_8b_eagle_k3_by_hand():
    """One EAGLE layer: 4,096 B per token more; the head's weights are one layer's share of
    the target's, 16.06e9 / 32 = 501,875,000 B; each trajectory holds its 8,192 tokens plus
    3 lookahead slots: 8,195 x 135,168 B = 1,107,701,760 B; the pool 135,679,338,086.4 -
    16.06e9 - 501,875,000 = 119,117,463,086.4 B holds floor(107.54) = 107 of them (without
    the drafter: 119,619,338,086.4 / (8,192 x 131,072) = 111.4 -> 111)."""
    r = _plan("llama-3.1-8b", [8192], speculative_method="eagle", num_speculative_tokens=3)
    plain = _plan("llama-3.1-8b", [8192])
    assert r.spec_draft_kv_bytes_per_token == r.spec_draft_kv_bytes_per_token_per_gpu == LLAMA8_LAYER
    assert r.kv_bytes_per_token == r.kv_bytes_per_token_per_gpu == LLAMA8_TOKEN + LLAMA8_LAYER
    assert r.draft_weights_bytes_per_gpu == pytest.approx(501_875_000)
    assert r.weights_bytes_per_gpu == pytest.approx(LLAMA8_WEIGHTS + LLAMA8_WEIGHTS / 32)
    assert r.kv_pool_bytes_per_gpu == pytest.approx(119_117_463_086.4, abs=1)
    assert (r.spec_lookahead_tokens, r.spec_grouped_draft_layers) == (3, 1)
    (c,) = r.contexts
    assert c.trajectory_tokens == 8192  # the context + output: the slots are held, not tokens
    assert c.kv_bytes_per_trajectory_per_gpu == 8195 * (LLAMA8_TOKEN + LLAMA8_LAYER) == 1_107_701_760
    assert c.kv_bytes_per_trajectory_charged_per_gpu == 1_107_701_760
    assert c.spec_draft_kv_bytes_per_trajectory == 8195 * LLAMA8_LAYER
    assert c.max_concurrent == math.floor(119_117_463_086.4 / 1_107_701_760) == 107
    assert plain.contexts[0].max_concurrent == 111
    # the per-group breakdown sums to the totals, the drafter a group of its own
    assert [(g.name, g.kind, g.num_layers, g.held_tokens) for g in c.groups] == [
        ("full", "full", 32, 8195), ("draft", "eagle", 1, 8195)]
    assert sum(g.bytes for g in c.groups) == c.kv_bytes_per_trajectory
    assert sum(g.bytes_per_gpu for g in c.groups) == c.kv_bytes_per_trajectory_per_gpu


def test_ngram_keeps_every_figure_but_says_so():
    """ngram drafts on the CPU: no KV, no weights, no lookahead slot."""
    plain = _plan("llama-3.1-8b", [8192, 32768], 500)
    r = _plan("llama-3.1-8b", [8192, 32768], 500, speculative_method="ngram", num_speculative_tokens=4)
    assert r.speculative_method == "ngram" and r.spec_lookahead_tokens == 0
    assert r.contexts == plain.contexts
    assert (r.kv_bytes_per_token, r.kv_pool_bytes_per_gpu) == (plain.kv_bytes_per_token, plain.kv_pool_bytes_per_gpu)


def test_draft_model_by_hand():
    """Llama-3.1-70B at TP 2 with a Llama-3.1-8B draft model, k 4: per GPU the target
    holds 80 x 2,048 = 163,840 B per token and the draft 32 x 2,048 = 65,536 B; weights
    70.55e9 + 8.03e9 = 78.58e9 B per GPU, pool 135,679,338,086.4 - 78.58e9 =
    57,099,338,086.4 B; a trajectory of 32,768 + 1,000 tokens holds 4 lookahead slots:
    33,772 x 229,376 = 7,746,486,272 B per GPU, so floor(7.37) = 7 fit."""
    r = _plan("llama-3.1-70b", [32768], 1000, num_gpus=2, tp=2, speculative_method="draft_model",
              num_speculative_tokens=4, draft_model=load_model("llama-3.1-8b"))  # fmt: skip
    assert r.draft_model == "llama-3.1-8b" and r.spec_grouped_draft_layers == 0
    assert r.spec_draft_kv_bytes_per_token_per_gpu == 32 * 2048
    assert r.spec_draft_kv_bytes_per_token == LLAMA8_TOKEN  # one full copy
    assert r.kv_bytes_per_token_per_gpu == 80 * 2048 + 32 * 2048
    assert r.draft_weights_bytes_per_gpu == pytest.approx(8.03e9)
    assert r.weights_bytes_per_gpu == pytest.approx(70.55e9 + 8.03e9)
    assert r.kv_pool_bytes_per_gpu == pytest.approx(57_099_338_086.4, abs=1)
    (c,) = r.contexts
    assert c.kv_bytes_per_trajectory_per_gpu == 33772 * 229376 == 7_746_486_272
    assert c.kv_bytes_per_trajectory_all_gpus == 2 * 7_746_486_272
    assert c.max_concurrent == 7
    # the draft's KV at --kv-dtype when given (fp8: half)
    fp8 = _plan("llama-3.1-70b", [32768], 1000, num_gpus=2, tp=2, kv_dtype="fp8",
                speculative_method="draft_model", num_speculative_tokens=4,
                draft_model=load_model("llama-3.1-8b"))  # fmt: skip
    assert fp8.spec_draft_kv_bytes_per_token_per_gpu == 32 * 1024


def test_gpt_oss_eagle_pads_the_sliding_group_as_vllm_does():
    """vLLM's own example (``_get_kv_cache_groups_uniform_page_size``): gpt-oss + EAGLE,
    12 sliding + 13 full layers, groups of 13, the sliding layers padded 12 -> 13. A
    trajectory of 4,096 tokens holds 4,099 (3 lookahead slots): full 12 x 4,099 x 2,048,
    sliding 13 x 128 x 2,048 (one a padding layer), the head 4,099 x 2,048."""
    m = load_model("gpt-oss-20b")
    assert drafter_padding_layers(m, 1) == {"sliding": 1, "full": 0}
    assert drafter_layer_padding(m, 1).group_size_layers == 13
    assert drafter_padding_layers(m, 0) == {"sliding": 0, "full": 0}
    r = _plan("gpt-oss-20b", [4096], speculative_method="eagle", num_speculative_tokens=3)
    plain = _plan("gpt-oss-20b", [4096])
    assert (plain.kv_cache_group_size_layers, plain.padding_layers) == (12, 0)
    assert (r.kv_cache_group_size_layers, r.padding_layers) == (13, 1)
    assert any("adds 1 to the 12 'sliding' layers" in w for w in r.warnings)
    (c,) = r.contexts
    by = {g.name: g for g in c.groups}
    assert by["full"].bytes == 12 * 4099 * 2048
    assert (by["sliding"].bytes, by["sliding"].padding_layers) == (13 * 128 * 2048, 1)
    assert by["sliding"].padding_bytes == 128 * 2048
    assert by["draft"].bytes == 4099 * 2048
    assert c.kv_bytes_per_trajectory == (12 * 4099 + 13 * 128 + 4099) * 2048
    assert c.padding_bytes_per_trajectory == 128 * 2048
    # the prompt's one 4,096-token prefill step holds all 4,096 tokens in every sliding
    # layer (vLLM V1: w - 1 plus the chunk, capped by the prompt): 25 x 4,096 x 2,048,
    # and the drafter's held tokens on top
    assert c.peak_kv_bytes_per_trajectory == (25 * 4096 + 4099) * 2048


def test_gemma_eagle_needs_less_padding():
    """gemma-3-27b: 52 sliding + 10 full layers run in groups of 10 (sliding held as 60);
    with an EAGLE layer the full spec has 11, groups of 11, sliding held as 55 (-5)."""
    m = load_model("gemma-3-27b")
    assert drafter_padding_layers(m, 1) == {"sliding": -5, "full": 0}
    (c,) = _plan("gemma-3-27b", [100], speculative_method="eagle", num_speculative_tokens=2).contexts
    by = {g.name: g for g in c.groups}
    assert (by["sliding"].num_layers, by["sliding"].padding_layers) == (52, 3)


def test_shared_prefix_shares_the_drafters_prefix():
    """Llama-3.1-8B + EAGLE k 3, 8,192-token contexts sharing 4,096: the prefix is stored
    once with the drafter's layer (4,096 x 135,168 B), each trajectory holds 4,096 + 3
    tokens of its own at 135,168 B."""
    r = _plan("llama-3.1-8b", [8192], shared_prefix_tokens=4096, speculative_method="eagle",
              num_speculative_tokens=3)  # fmt: skip
    (c,) = r.contexts
    per = LLAMA8_TOKEN + LLAMA8_LAYER
    assert c.shared_prefix_bytes == 4096 * per
    assert c.max_concurrent_shared == math.floor((r.kv_pool_bytes_per_gpu - 4096 * per) / (4099 * per))


@pytest.mark.parametrize(("kw", "message"), [
    ({"speculative_method": "medusa", "num_speculative_tokens": 2}, "--speculative-method: 'medusa' is not one of"),
    ({"speculative_method": "eagle"}, "needs --num-speculative-tokens"),
    ({"num_speculative_tokens": 2}, "--num-speculative-tokens needs --speculative-method"),
    ({"speculative_method": "eagle", "num_speculative_tokens": 33}, "--num-speculative-tokens"),
    ({"speculative_method": "draft_model", "num_speculative_tokens": 2}, "needs --draft-model"),
    ({"speculative_method": "eagle", "num_speculative_tokens": 2, "draft_model": "llama-3.1-8b"},
     "--draft-model is only for --speculative-method draft_model, not eagle"),
    ({"speculative_method": "eagle", "num_speculative_tokens": 2, "pp": 2, "num_gpus": 2},
     "speculative decoding with pp > 1 is not modelled"),
])  # fmt: skip
def test_refusals_are_one_line(kw, message):
    if isinstance(kw.get("draft_model"), str):
        kw = {**kw, "draft_model": load_model(kw["draft_model"])}
    with pytest.raises(KvsimError, match=message) as info:
        _plan("llama-3.1-8b", [8192], **kw)
    assert "\n" not in str(info.value)


def test_a_state_space_model_says_what_a_run_refuses():
    r = _plan("nemotron-h-8b", [4096], speculative_method="mtp", num_speculative_tokens=2)
    assert any("kvsim run refuses it with a prefix-caching allocator" in w
               and "vllm-project/vllm#26201" in w for w in r.warnings)  # fmt: skip
    assert not any("refuses" in w for w in _plan("nemotron-h-8b", [4096]).warnings)


def test_the_run_and_plan_size_the_drafter_by_one_rule():
    """The resolver's drafter figures are the sizing function's (EAGLE at TP 2 on
    Llama-3.1-70B: one layer, 2 x 4 heads per rank x 128 x 2 = 2,048 B per GPU)."""
    doc = one_request_doc("llama-3.1-70b", 100, 10)
    doc["hardware"]["tp"] = 2
    doc["speculative"] = {"method": "eagle", "num_speculative_tokens": 3, "acceptance_rate": 0.5}
    res = resolve(load_scenario(doc))
    d = drafter_sizing("eagle", 3, load_model("llama-3.1-70b"), None, 2)
    assert res.draft_kv_bytes_per_token_per_gpu == d.kv_bytes_per_token_per_gpu == 2048
    assert d.weights_bytes == 70.55e9 * 2 / 80 and d.weights_bytes_per_gpu == d.weights_bytes / 2


#: (model, method, draft model, prompt, output): one request, peak against plan
CONSISTENCY = [
    ("llama-3.1-8b", "eagle", None, 16370, 14),
    ("gpt-oss-20b", "eagle", None, 16370, 14),
    ("llama-3.1-70b", "draft_model", "llama-3.1-8b", 1000, 30),
]


@pytest.mark.parametrize(("model", "method", "draft", "prompt", "output"), CONSISTENCY,
                         ids=[f"{c[0]}-{c[1]}" for c in CONSISTENCY])  # fmt: skip
def test_one_request_peak_matches_plan(model, method, draft, prompt, output, tmp_path):
    """A one-request run with the same speculative section peaks at plan's peak bytes per
    trajectory within block rounding (as ``tests/engine/test_hybrid_kv_peak.py`` for plain
    models): the run's last verify may hold one slot past plan's context + output + k
    (its ``1 + d`` verified slots plus the k lookahead), and whole 16-token blocks of the
    table (two for a hybrid model: the table's and the side groups', one table block)."""
    doc = one_request_doc(model, prompt, output)
    doc["speculative"] = {"method": method, "num_speculative_tokens": 3, "acceptance_rate": 0.8}
    if draft:
        doc["speculative"]["draft_model"] = draft
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    s = run_scenario(str(path), **{"engine.check_invariants": True}).summary
    assert s["requests_completed"] == 1
    r = plan_capacity(PlanInputs(
        model=load_model(model), accelerator=load_accelerator("h200-141gb"), num_gpus=1,
        contexts=[prompt + output], speculative_method=method, num_speculative_tokens=3,
        draft_model=load_model(draft) if draft else None,
    ))  # fmt: skip
    (c,) = r.contexts
    assert s["kv_bytes_per_token"] == r.kv_bytes_per_token_per_gpu
    assert s["spec_draft_kv_bytes_per_token"] == r.spec_draft_kv_bytes_per_token_per_gpu
    rounding = 2 * 16 * r.kv_bytes_per_token_per_gpu
    assert c.peak_kv_bytes_per_trajectory <= s["peak_allocated_bytes"] <= c.peak_kv_bytes_per_trajectory + rounding
    draft_peak = s["spec_draft_kv_peak_bytes"]
    assert c.spec_draft_kv_bytes_per_trajectory <= draft_peak
    assert draft_peak <= c.spec_draft_kv_bytes_per_trajectory + 16 * r.spec_draft_kv_bytes_per_token_per_gpu


def test_the_scenario_and_plan_accept_one_list_of_methods():
    """h120: the scenario's ``speculative.method`` type is ``sim.sizing.speculative``'s
    ``SpeculativeMethod``, whose values are the ``METHODS`` that ``kvsim plan`` checks (the
    scenario kept its own copy of the four names), so a method added to one is in both:
    the scenario's JSON schema lists exactly them, and each is a method plan accepts."""
    from typing import get_args

    from sim.sched.speculative import SpeculativeConfig
    from sim.sizing.speculative import METHODS, SpeculativeMethod

    assert SpeculativeConfig.model_fields["method"].annotation is SpeculativeMethod
    assert METHODS == get_args(SpeculativeMethod) == ("ngram", "eagle", "mtp", "draft_model")
    assert SpeculativeConfig.model_json_schema()["properties"]["method"]["enum"] == list(METHODS)
