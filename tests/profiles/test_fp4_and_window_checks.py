"""Two profile checks a serving researcher meets with today's models:

* a sliding window (or local chunk) longer than the model's ``max_context_tokens`` is
  refused in one line naming the field (such a window never slides; it used to be sized
  as a window silently);
* an ``nvfp4`` KV cache on an accelerator without FP4 (no ``peak_fp4_flops_per_s``: H100,
  H200, A100...) is warned about by ``kvsim plan``, ``kvsim validate`` and ``kvsim run``
  (it used to be planned at 4.5 bits without a word); Blackwell profiles (b200,
  rtx-pro-6000) state their FP4 peak and plan it silently.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import KvsimError
from sim.profiles import load_accelerator, load_model
from sim.scenario.load import load_scenario
from sim.scenario.resolve import resolve
from sim.sizing.plan import PlanInputs, plan_capacity

ROOT = Path(__file__).resolve().parents[2]
TRACE = ROOT / "workloads/data/mooncake/synthetic_trace.jsonl"


def test_window_longer_than_context_is_refused_naming_the_field():
    with pytest.raises(KvsimError) as err:
        load_model("gpt-oss-20b", overrides={"sliding_window.window_tokens": 500_000})
    msg = str(err.value)
    assert "sliding_window.window_tokens 500,000 exceeds max_context_tokens 131,072" in msg
    assert "Traceback" not in msg and "\n" not in msg


def test_chunk_longer_than_a_lowered_context_is_refused():
    # llama-4-scout's chunked-local group (8,192-token chunks) against a 4,096 window
    with pytest.raises(KvsimError, match=r"layer_groups\[\d\]\.window_tokens 8,192 exceeds max_context_tokens 4,096"):
        load_model("llama-4-scout-17b-16e", overrides={"max_context_tokens": 4096})


def test_window_equal_to_the_context_is_accepted():
    m = load_model("gpt-oss-20b", overrides={"sliding_window.window_tokens": 131_072})
    assert m.sliding_window.window_tokens == m.max_context_tokens == 131_072


def _plan(gpu: str, kv_dtype: str):
    return plan_capacity(PlanInputs(
        model=load_model("llama-3.1-70b"), accelerator=load_accelerator(gpu), num_gpus=2,
        contexts=[8192], kv_dtype=kv_dtype, gpu_memory_utilization=0.9,
    ))  # fmt: skip


def _fp4(warnings) -> list[str]:
    return [w for w in warnings if "nvfp4" in w]


@pytest.mark.parametrize("gpu", ["h100-sxm-80gb", "h200-141gb", "a100-80gb", "mi300x-192gb"])
def test_nvfp4_kv_on_a_chip_without_fp4_is_warned(gpu):
    r = _plan(gpu, "nvfp4")
    (w,) = _fp4(r.warnings)
    assert w.startswith(f"kv_dtype nvfp4 on {gpu}: this accelerator has no FP4")
    # still sized at 4.5 bits: 2 x 80 x 8 x 128 x 0.5625 = 92,160 B per token
    assert r.kv_bytes_per_token == 92_160


@pytest.mark.parametrize("gpu", ["b200-192gb", "rtx-pro-6000-server-96gb"])
def test_nvfp4_kv_on_blackwell_is_not_warned(gpu):
    assert load_accelerator(gpu).peak_fp4_flops_per_s is not None
    assert _fp4(_plan(gpu, "nvfp4").warnings) == []


def test_other_kv_dtypes_on_hopper_are_not_warned():
    assert _fp4(_plan("h100-sxm-80gb", "fp8").warnings) == []
    assert _fp4(_plan("h100-sxm-80gb", "bf16").warnings) == []


def _scenario(tmp_path: Path, gpu: str, kv_dtype: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(
        "schema_version: 1\nname: fp4\nseed: 1\n"
        f"model: {{profile: llama-3.1-8b, kv_dtype: {kv_dtype}}}\n"
        f"hardware: {{accelerator: {gpu}, tp: 1}}\n"
        "allocator: {kind: paged, block_size: 16}\n"
        "scheduler: {kind: vllm_v1, max_num_batched_tokens: 2048}\n"
        f"workload: {{kind: mooncake, path: {TRACE}, num_requests: 2}}\n"
    )
    return p


def test_scenario_resolve_warns_of_nvfp4_on_h100_only(tmp_path):
    h100 = resolve(load_scenario(_scenario(tmp_path, "h100-sxm-80gb", "nvfp4")))
    assert len(_fp4(h100.warnings)) == 1
    b200 = resolve(load_scenario(_scenario(tmp_path, "b200-192gb", "nvfp4")))
    assert _fp4(b200.warnings) == []
    bf16 = resolve(load_scenario(_scenario(tmp_path, "h100-sxm-80gb", "bf16")))
    assert _fp4(bf16.warnings) == []


# ------------------------------------------------------------------ trace rows vs window
def test_too_long_warning_counts_prompts_at_or_over_the_window():
    from sim.workload.trace_files import too_long_warning

    # the scheduler rejects prompt >= max_model_len (no room for one output token)
    w = too_long_warning([100, 8191, 8192, 40_160], 8192)
    assert w.startswith("workload: 2 of 4 replayed requests (50.0%) have prompts of at least "
                        "scheduler.max_model_len 8,192 tokens (the longest 40,160)")
    assert too_long_warning([100, 8191], 8192) == ""
    assert too_long_warning([10**6], None) == ""


def _mooncake_scenario(tmp_path: Path, model: str) -> Path:
    p = tmp_path / f"{model}.yaml"
    p.write_text(
        "schema_version: 1\nname: long\nseed: 1\n"
        f"model: {model}\nhardware: {{accelerator: h100-sxm-80gb, tp: 1}}\n"
        "allocator: {kind: paged, block_size: 16}\n"
        "scheduler: {kind: vllm_v1, max_num_batched_tokens: 2048}\n"
        f"workload: {{kind: mooncake, path: {TRACE}, num_requests: 3}}\n"
    )
    return p


def test_validate_warns_when_replayed_prompts_exceed_the_window(run_cli, tmp_path):
    """The shipped trace's first 3 rows have 40,160 / 36,640 / 23,769-token prompts
    (beyond nemotron-h-8b's 8,192-token window, within llama-3.1-8b's 131,072): validate
    used to say only ``ok`` and the run rejected all three."""
    code, out, err = run_cli(["validate", str(_mooncake_scenario(tmp_path, "nemotron-h-8b"))])
    assert code == 0 and ": ok: " in out
    assert ("workload: 3 of 3 replayed requests (100.0%) have prompts of at least "
            "scheduler.max_model_len 8,192 tokens (the longest 40,160)") in err
    code, out, err = run_cli(["validate", str(_mooncake_scenario(tmp_path, "llama-3.1-8b"))])
    assert code == 0 and "replayed requests" not in err


@pytest.mark.parametrize("command", [
    ["plan", "--model", "llama-3.1-70b", "--num-gpus", "2", "--context", "8192"],
    ["breakeven", "--model", "llama-3.1-70b", "--num-gpus", "2", "--context", "8192", "--wait", "5"],
])  # fmt: skip
def test_plan_and_breakeven_say_it_on_stderr(run_cli, command):
    code, _, err = run_cli([*command, "--gpu", "h100-sxm-80gb", "--kv-dtype", "nvfp4"])
    assert code == 0 and "kvsim: warning: kv_dtype nvfp4 on h100-sxm-80gb: this accelerator has no FP4" in err
    code, _, err = run_cli([*command, "--gpu", "b200-192gb", "--kv-dtype", "nvfp4"])
    assert code == 0 and "nvfp4" not in err
