"""Issue 27 follow-up: a run raises the block size as vLLM does for a model with
Mamba/linear-attention states (``sim.sizing.hybrid_pages``), so ``kvsim plan`` and runs
agree; the summary says so (``block_size_tokens``, ``requested_block_size_tokens``); a
dense or windowed model's block size and summary keys are unchanged."""

from __future__ import annotations

import json

import pytest
import yaml

from sim.run import build, run_scenario


def _scenario(tmp_path, model: str, block: int) -> str:
    doc = {
        "schema_version": 1, "name": "one_request", "seed": 0, "model": model,
        "hardware": {"accelerator": "h200-141gb", "tp": 1, "kv_pool_bytes_per_gpu": 40e9},
        "allocator": {"kind": "paged", "block_size": block},
        "scheduler": {"kind": "vllm_v1"},
        "workload": {"kind": "requests", "requests": [
            {"count": 2, "at_s": 0.0, "prompt_tokens": 1000, "output_tokens": 8}]},
    }  # fmt: skip
    path = tmp_path / f"{model}-{block}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


@pytest.mark.parametrize("model", ["qwen3-next-80b-a3b", "nemotron-h-8b"])
@pytest.mark.parametrize("block", [16, 64])
def test_run_uses_plans_raised_block_size(model, block, tmp_path, run_cli):
    code, out, _ = run_cli(
        f"kvsim plan --model {model} --gpu h200-141gb --num-gpus 1 --context 1008 "
        f"--block-size {block} --json"
    )
    assert code == 0
    plan = json.loads(out)
    raised = plan["block_size_tokens"]
    assert raised > block and plan["requested_block_size_tokens"] == block
    path = _scenario(tmp_path, model, block)
    assert build(path).kv.block_size == raised
    s = run_scenario(path, **{"engine.check_invariants": True}).summary
    assert s["requests_completed"] == 2
    assert s["block_size_tokens"] == raised and s["requested_block_size_tokens"] == block
    # one sequence's table holds ceil(1008 / raised) blocks: a single block here
    assert s["peak_allocated_bytes"] >= 2 * raised * build(path).kv.alloc.kv_bytes_per_token


@pytest.mark.parametrize("model", ["llama-3.1-8b", "gemma-3-27b"])
def test_models_without_states_keep_their_block_size(model, tmp_path):
    path = _scenario(tmp_path, model, 16)
    assert build(path).kv.block_size == 16
    s = run_scenario(path).summary
    assert "block_size_tokens" not in s and "requested_block_size_tokens" not in s
