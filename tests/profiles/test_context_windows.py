"""Model profiles with long context windows, and the shipped scenarios that use them.

Each profile's KV bytes per token is F1 (2 x layers x KV heads x head_dim x dtype bytes;
MLA: layers x latent x bytes) and its window is the config.json's
max_position_embeddings. Every shipped scenario runs on a model whose window holds its
requests (prompt + output), so nothing is rejected or cut short by the window.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.cost import CostModel
from sim.profiles import load_accelerator, load_model
from sim.run import run_scenario
from sim.scenario.load import load_scenario
from sim.sizing.kv import kv_bytes_per_token, kv_bytes_per_token_per_gpu
from sim.units import dtype_bytes

ROOT = Path(__file__).resolve().parents[2]
AZURE_CONV = ROOT / "workloads/data/azure_llm_2023/AzureLLMInferenceTrace_conv.csv"

# name: (KV bytes per token by F1 from the config's numbers, window, params_total, active)
PROFILES = {
    "llama-3.1-8b": (2 * 32 * 8 * 128 * 2, 131_072, 8.03e9, None),  # 131,072 B
    "llama-3.1-70b": (2 * 80 * 8 * 128 * 2, 131_072, 70.55e9, None),  # 327,680 B
    "codellama-7b": (2 * 32 * 32 * 128 * 2, 16_384, 6.74e9, None),  # 524,288 B
    "qwen3-32b": (2 * 64 * 8 * 128 * 2, 40_960, 32.76e9, None),  # 262,144 B
    "qwen2.5-coder-32b": (2 * 64 * 8 * 128 * 2, 32_768, 32.76e9, None),  # 262,144 B
    "qwen3-30b-a3b": (2 * 48 * 4 * 128 * 2, 40_960, 30.5e9, 3.3e9),  # 98,304 B
    "deepseek-v3": (61 * (512 + 64) * 2, 163_840, 671e9, 37e9),  # 70,272 B, latent only
}


@pytest.mark.parametrize("name", list(PROFILES))
def test_kv_bytes_per_token_window_and_params(name):
    kv_bytes, window, params, active = PROFILES[name]
    m = load_model(name)
    assert kv_bytes_per_token(m) == kv_bytes
    assert m.max_context_tokens == window
    assert m.params_total == params and m.params_active == active


def test_literal_kv_figures():
    assert PROFILES["llama-3.1-8b"][0] == 131_072 and PROFILES["llama-3.1-70b"][0] == 327_680
    assert PROFILES["codellama-7b"][0] == 524_288 and PROFILES["qwen3-30b-a3b"][0] == 98_304


def test_qwen3_32b_heads_wider_than_hidden_size():
    """Qwen3-32B: 64 query heads of 128 (8,192) over a 5,120-wide residual stream."""
    m = load_model("qwen3-32b")
    assert m.num_q_heads * m.head_dim == 8192 != m.d_model == 5120
    assert kv_bytes_per_token_per_gpu(m, tp=8) == 2 * 64 * 1 * 128 * 2  # one KV head per GPU


def test_qwen3_moe_uses_its_active_experts():
    m = load_model("qwen3-30b-a3b")
    assert m.active_params == 3.3e9 < m.params_total == 30.5e9


@pytest.mark.parametrize(
    "new,old",
    [("llama-3.1-8b", "llama-3-8b"), ("llama-3.1-70b", "llama-3-70b"), ("codellama-7b", "llama-2-7b")],
)
def test_longer_window_same_geometry(new, old):
    a, b = load_model(new), load_model(old)
    for field in ("attention", "num_layers", "num_q_heads", "num_kv_heads", "head_dim", "d_model"):
        assert getattr(a, field) == getattr(b, field), field
    assert dtype_bytes(a.kv_dtype) == dtype_bytes(b.kv_dtype)
    assert dtype_bytes(a.weight_dtype) == dtype_bytes(b.weight_dtype)
    assert a.max_context_tokens > b.max_context_tokens


def test_codellama_steps_take_llama_2_7b_time():
    """chat_azure moved from llama-2-7b to codellama-7b without changing a step time."""
    gpu = load_accelerator("a100-80gb")
    new, old = CostModel(load_model("codellama-7b"), gpu), CostModel(load_model("llama-2-7b"), gpu)
    for tokens, hist in ((512, 0), (512, 3584), (4096, 0)):
        assert new.prefill_time_s(tokens, hist) == old.prefill_time_s(tokens, hist)
    assert np.array_equal(new.decode_run_times(64, 100_000, 8), old.decode_run_times(64, 100_000, 8))


def _model(scenario: str):
    sc = load_scenario(ROOT / scenario).scenario
    return load_model(sc.model.profile, overrides=sc.model.overrides)


@pytest.mark.parametrize(
    "scenario,name",
    [
        ("workloads/agent_swarm.yaml", "llama-3.1-8b"),
        ("workloads/agent_swarm_pressure.yaml", "llama-3.1-8b"),
        ("workloads/seed_tool_wait_45s.yaml", "llama-3.1-70b"),
        ("workloads/chat_azure.yaml", "codellama-7b"),
        ("benchmarks/chat_azure_5000.yaml", "codellama-7b"),
        ("benchmarks/agents_500.yaml", "llama-3.1-70b"),
    ],
)
def test_shipped_scenarios_name_long_window_models(scenario, name):
    assert _model(scenario).name == name


def test_e24_keeps_the_chapter_parameter_count_and_fits_the_window():
    m = _model("workloads/seed_tool_wait_45s.yaml")
    assert m.params_total == 70.6e9  # SPEC E24's figures (the profile has 70.55e9)
    assert 32_768 + 1 + 512 + 1 <= m.max_context_tokens  # task, reply, observation, reply


def test_azure_conversation_trace_fits_codellama_window():
    """Every request of the trace (both chat scenarios read it in order) fits 16,384."""
    trace = pd.read_csv(AZURE_CONV)
    longest = int((trace.ContextTokens + trace.GeneratedTokens).max())
    assert longest == 14_089 <= load_model("codellama-7b").max_context_tokens
    assert longest > load_model("llama-2-7b").max_context_tokens  # why it moved


def _longest_request(result) -> int:
    r = result.requests
    assert (r.status != "rejected").all() and (r.finish_reason != "length").all()
    return int((r.prompt_tokens + r.output_tokens).max())


def test_agent_swarm_contexts_fit_the_window():
    longest = _longest_request(run_scenario(str(ROOT / "workloads/agent_swarm.yaml")))
    assert 8_192 < longest == 33_027 <= load_model("llama-3.1-8b").max_context_tokens


@pytest.mark.slow
def test_agents_500_contexts_fit_the_window():
    longest = _longest_request(run_scenario(str(ROOT / "benchmarks/agents_500.yaml")))
    assert 8_192 < longest == 104_542 <= load_model("llama-3.1-70b").max_context_tokens
