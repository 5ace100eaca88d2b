"""The built-in runners: scenario (engine, lazily), allocator, trace_replay; flattening."""

from __future__ import annotations

import json
import sys
import types

import pytest

from sim.errors import KvsimError
from sim.regress.runners import RunContext, flatten_metrics, get_runner, runner_names


def _run(kind, inputs, base_dir):
    runner = get_runner(kind)
    return runner.run(runner.inputs_model.model_validate(inputs), RunContext(base_dir))


def test_builtin_runners_are_registered():
    assert {"scenario", "allocator", "trace_replay"} <= set(runner_names())


def test_flatten_keeps_numbers_and_none_only():
    import numpy as np

    summary = {"ttft_s": {"p50": 0.1, "p99": np.float64(0.4)}, "preemptions": np.int64(2),
               "prefix_hit_rate": None, "seed": 3, "label": "x", "flag": True, "tags": [1, 2]}  # fmt: skip
    flat = flatten_metrics(summary)
    assert flat == {"ttft_s.p50": 0.1, "ttft_s.p99": 0.4, "preemptions": 2,
                    "prefix_hit_rate": None, "seed": 3}  # fmt: skip
    assert type(flat["ttft_s.p99"]) is float and type(flat["preemptions"]) is int


def test_scenario_runner_without_the_engine_says_so(tmp_path, monkeypatch):
    (tmp_path / "s.yaml").write_text("seed: 1\n")
    monkeypatch.setitem(sys.modules, "sim.run", None)  # import sim.run -> ModuleNotFoundError
    with pytest.raises(KvsimError, match=r"scenario runner needs the engine \(sim.run\)"):
        _run("scenario", {"scenario": "s.yaml"}, tmp_path)


def test_scenario_runner_flattens_the_summary_and_drops_wall_clock(tmp_path, monkeypatch):
    (tmp_path / "s.yaml").write_text("seed: 1\n")
    calls = []

    def run_scenario(path, **overrides):
        calls.append((path, overrides))
        summary = {"ttft_s": {"mean": 0.2, "p99": 0.5}, "preemptions": 1, "wall_time_s": 3.1}
        return types.SimpleNamespace(summary=summary)

    fake = types.ModuleType("sim.run")
    fake.run_scenario = run_scenario
    monkeypatch.setitem(sys.modules, "sim.run", fake)
    out = _run("scenario", {"scenario": "s.yaml", "overrides": {"seed": 3}}, tmp_path)
    assert out == {"ttft_s.mean": 0.2, "ttft_s.p99": 0.5, "preemptions": 1}
    assert calls == [(str(tmp_path / "s.yaml"), {"seed": 3})]


def test_scenario_runner_missing_file(tmp_path):
    with pytest.raises(KvsimError, match="nope.yaml: scenario file not found"):
        _run("scenario", {"scenario": "nope.yaml"}, tmp_path)


def test_trace_replay_runner_counts_exactly(tmp_path):
    reqs = [
        {"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]},
        {"timestamp": 1, "input_length": 1300, "output_length": 1, "hash_ids": [1, 2, 3]},
        {"timestamp": 2, "input_length": 512, "output_length": 1, "hash_ids": [4]},
        {"timestamp": 3, "input_length": 1000, "output_length": 1, "hash_ids": [1, 5]},
    ]
    (tmp_path / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in reqs))
    out = _run("trace_replay", {"trace": "t.jsonl"}, tmp_path)
    assert out["requests"] == 4 and out["prompt_tokens"] == 1024 + 1300 + 512 + 1000
    assert out["hit_tokens"] == 1024 + 512  # request 2 hits [1,2], request 4 hits [1]
    assert out["hit_rate"] == 1536 / 3836 and out["evicted_blocks"] == 0
    assert "block_size" not in out and "cache_tokens" not in out
    first = _run("trace_replay", {"trace": "t.jsonl", "first_requests": 2}, tmp_path)
    assert (first["requests"], first["hit_tokens"]) == (2, 1024)


def _paged(**over):
    inputs = {"kind": "paged", "pool_bytes": "1 MiB", "kv_bytes_per_token": 256,
              "options": {"block_size": 16}, "request_tokens": [64, 100000],
              "generator": {"n_ops": 200, "seed": 5, "max_prompt_tokens": 300,
                            "max_append_tokens": 20, "max_live": 8}}  # fmt: skip
    inputs.update(over)
    return inputs


def test_allocator_runner_is_deterministic_and_reports_the_metrics(tmp_path):
    a = _run("allocator", _paged(), tmp_path)
    b = _run("allocator", _paged(), tmp_path)
    assert a == b
    for key in ("eta_alloc", "eta_effective", "peak_allocated_bytes", "cow_copies",
                "bytes_copied", "eta_alloc_mean", "misses", "phi_ext_at_64_tokens"):  # fmt: skip
        assert key in a, key
    assert a["ops"] == 200
    # 100k tokens x 256 B > a 1 MiB pool: it does not fit, but F9 of a block pool is 0
    # by construction (SPEC F9; memory.parquet's phi_ext says the same)
    assert a["phi_ext_at_100000_tokens"] == 0.0
    assert a["peak_allocated_bytes"] <= 2**20
    c = _run("allocator", _paged(generator={"n_ops": 200, "seed": 6}), tmp_path)
    assert c != a


def test_allocator_runner_reads_a_trace_file(tmp_path):
    (tmp_path / "ops.yaml").write_text(
        "allocator: {kind: paged, pool_bytes: 4096, kv_bytes_per_token: 16, block_size: 4}\n"
        "ops: ['allocate 1 10', 'fork 1 2', 'append 2 1', 'append 1 3']\n"
    )
    out = _run("allocator", {"trace": "ops.yaml", "request_tokens": [4]}, tmp_path)
    # 1: blocks of 4+4+2 tokens; fork shares all three; child's write into the shared
    # partial block copies it (CoW); the parent then writes 2 into its own partial block
    # and 1 into a new block
    assert out["cow_copies"] == 1
    assert out["num_sequences"] == 2 and out["misses"] == 0
    assert out["allocated_bytes"] == 5 * 4 * 16
    # the suite's own settings override the trace's allocator section: with 16-token
    # blocks the parent holds one block and the child's CoW copy another
    out16 = _run("allocator", {"trace": "ops.yaml", "options": {"block_size": 16}}, tmp_path)
    assert out16["allocated_bytes"] == 2 * 16 * 16 and out16["cow_copies"] == 1


def test_allocator_runner_errors_are_one_line(tmp_path):
    with pytest.raises(KvsimError, match="unknown allocator kind 'magic'"):
        _run("allocator", _paged(kind="magic"), tmp_path)
    with pytest.raises(KvsimError, match="missing.yaml: allocation trace not found"):
        _run("allocator", {"trace": "missing.yaml", "kind": "paged"}, tmp_path)
