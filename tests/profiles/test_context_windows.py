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


#: the KV bytes per token the comments and docs quote, as literal figures
LITERAL_KV_BYTES = {
    "llama-3.1-8b": 131_072,
    "llama-3.1-70b": 327_680,
    "codellama-7b": 524_288,
    "qwen3-32b": 262_144,
    "qwen2.5-coder-32b": 262_144,
    "qwen3-30b-a3b": 98_304,
    "deepseek-v3": 70_272,
}


@pytest.mark.parametrize("name", list(LITERAL_KV_BYTES))
def test_literal_kv_figures(name):
    """The quoted figure is what sim.sizing computes from the shipped profile (whole model,
    and per GPU at TP 1 and PP 1)."""
    m = load_model(name)
    assert kv_bytes_per_token(m) == LITERAL_KV_BYTES[name]
    assert kv_bytes_per_token_per_gpu(m, tp=1, pp=1) == LITERAL_KV_BYTES[name]


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
        ("workloads/coding_agent_swarm.yaml", "llama-3.1-70b"),
        ("workloads/function_calling_h200.yaml", "gpt-oss-120b"),
        ("workloads/human_in_loop_nvme.yaml", "llama-3.1-70b"),
        ("workloads/multi_agent_team.yaml", "llama-3.1-8b"),
        ("workloads/tree_search_h100.yaml", "llama-3.1-8b"),
        ("workloads/mixed_chat_agents.yaml", "llama-3.1-70b"),
        ("workloads/mooncake_replay.yaml", "llama-3.1-70b"),
        ("workloads/harness_layout.yaml", "llama-3.1-8b"),
        ("workloads/interactive_coding_service.yaml", "deepseek-v3"),
    ],
)
def test_shipped_scenarios_name_long_window_models(scenario, name):
    assert _model(scenario).name == name


def test_e24_keeps_the_chapter_parameter_count_and_fits_the_window():
    m = _model("workloads/seed_tool_wait_45s.yaml")
    assert m.params_total == 70.6e9  # E24's figures (the profile has 70.55e9)
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


def test_mooncake_replay_skips_the_requests_beyond_the_window():
    """The replayed rows (250 to 2,049) all fit Llama-3.1's window; 10 rows of the trace do
    not: row 249, then row 2,050 and eight more after it."""
    import json

    sc = load_scenario(ROOT / "workloads/mooncake_replay.yaml").scenario.workload
    lines = (ROOT / "workloads/data/mooncake/synthetic_trace.jsonl").read_text().splitlines()
    total = [r["input_length"] + max(1, r["output_length"]) for r in map(json.loads, lines)]
    window = load_model("llama-3.1-70b").max_context_tokens
    too_long = [i for i, t in enumerate(total) if t > window]
    assert len(too_long) == 10 and too_long[:2] == [249, 2050]
    rows = total[sc.start_row : sc.start_row + sc.num_requests]
    assert (sc.start_row, len(rows)) == (250, 1800) and max(rows) <= window


@pytest.mark.slow
def test_agents_500_contexts_fit_the_window():
    longest = _longest_request(run_scenario(str(ROOT / "benchmarks/agents_500.yaml")))
    assert 8_192 < longest == 78_075 <= load_model("llama-3.1-70b").max_context_tokens


def test_interactive_service_sessions_fit_the_window():
    """Every prompt of the 32 shipped Claude Code sessions (with its reply) stays below the
    compaction threshold of DeepSeek-V3's window (90 %), so the replay is the recording."""
    from sim.prefix.session_trace import load_sessions

    sessions = load_sessions(ROOT / "workloads/data/claude_code/sessions.jsonl.gz")
    longest = max(c.prompt_tokens + c.output_tokens for s in sessions for c in s.calls())
    window = _model("workloads/interactive_coding_service.yaml").max_context_tokens
    assert 100_000 < longest == 139_014 <= 0.9 * window == 147_456.0
