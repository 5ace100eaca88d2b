"""Scenario files: validation, one-line file:line errors, dotted overrides, the JSON schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.scenario import json_schema, load_scenario, make_allocator_for, parse_set, resolve

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "workloads").glob("*.yaml")) + sorted((ROOT / "benchmarks").glob("*.yaml"))
SHIPPED = [p for p in SHIPPED if not p.name.endswith("_sweep.yaml")]  # sweep files: tests/sweep

BASE = """\
schema_version: 1
name: t
model: chapter-70b
hardware:
  accelerator: e20-accelerator
allocator:
  kind: paged
  block_size: 16
scheduler:
  kind: vllm_v1
  max_num_batched_tokens: 544
workload:
  kind: requests
  requests:
    - count: 2
      prompt_tokens: 100
      output_tokens: 10
"""


def _write(tmp_path, text: str) -> Path:
    p = tmp_path / "s.yaml"
    p.write_text(text)
    return p


def _error(tmp_path, text: str, overrides=None) -> str:
    p = _write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        make_allocator_for(resolve(load_scenario(p, overrides)))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg.replace(str(p), "FILE")


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_scenarios_validate(path):
    resolved = resolve(load_scenario(path))
    make_allocator_for(resolved)
    assert resolved.pool_bytes > 0 and resolved.scenario.schema_version == 1


def test_defaults_are_filled_in(tmp_path):
    sc = load_scenario(_write(tmp_path, BASE)).scenario
    assert sc.seed == 0 and sc.engine.exact is False and sc.pause_policy.kind == "hold"
    assert sc.scheduler.chunked_prefill is True and sc.cost.mfu_prefill == 0.6
    assert sc.model.profile == "chapter-70b"  # the string shorthand


@pytest.mark.parametrize(
    "edit, expected",
    [
        (
            ("  block_size: 16", "  blocksize: 16"),
            "FILE:8: allocator.blocksize: unknown field; valid: block_size, kind",
        ),
        (
            ("  kind: paged", "  kind: pagd"),
            "FILE:7: allocator.kind: unknown kind 'pagd'; valid: buddy, contiguous, paged, "
            "paged_hash, radix, static",
        ),
        (
            ("  max_num_batched_tokens: 544", "  max_num_batched_tokens: lots"),
            "FILE:11: scheduler.max_num_batched_tokens: Input should be a valid integer",
        ),
        (
            ("      output_tokens: 10", "      output_tokenz: 10"),
            "FILE:15: workload.requests.0.output_tokens: required field is missing (and 1 more "
            "problem)",
        ),
        (
            ("  kind: requests", "  kind: chat"),
            "FILE:12: workload.num_requests: required field is missing (and 3 more problems)",
        ),
        (("schema_version: 1", "schema_version: 2"), "FILE:1: schema_version: Input should be 1"),
        (
            ("  block_size: 16", "  block_size: -4"),
            "FILE:8: allocator.block_size: must be a positive whole number, got -4",
        ),
        (("model: chapter-70b", "model: nope"), "FILE:3: model: unknown model 'nope'; valid: "),
        (
            ("  accelerator: e20-accelerator", "  accelerator: e20-accelerator\n  tp: 3"),
            "FILE:6: hardware.tp: tp=3 must divide the 64 query heads of chapter-70b",
        ),
    ],
)
def test_errors_are_one_line_with_file_line_field_and_choices(tmp_path, edit, expected):
    old, new = edit
    assert old in BASE
    msg = _error(tmp_path, BASE.replace(old, new))
    assert msg.startswith(expected), msg


def test_unknown_kind_lists_every_valid_kind(tmp_path):
    msg = _error(tmp_path, BASE.replace("  kind: paged", "  kind: pagd"))
    valid = msg.split("; valid: ")[1].split(", ")
    assert {"buddy", "contiguous", "paged", "paged_hash", "radix", "static"} <= set(valid)


def test_yaml_syntax_error_names_the_line(tmp_path):
    msg = _error(tmp_path, BASE.replace("  block_size: 16", "  block_size: [16"))
    assert msg.startswith("FILE:") and "invalid YAML" in msg


def test_dotted_overrides(tmp_path):
    p = _write(tmp_path, BASE)
    sets = parse_set(
        [
            "seed=3",
            "scheduler.chunked_prefill=false",
            "allocator.block_size=32",
            "workload.requests.0.count=5",
            "cost.weights_bytes=140e9",
        ]
    )
    sc = load_scenario(p, sets).scenario
    assert sc.seed == 3 and sc.scheduler.chunked_prefill is False
    assert sc.allocator.block_size == 32 and sc.workload.requests[0].count == 5
    assert sc.cost.weights_bytes == 140e9


def test_switching_a_kind_keeps_only_the_options_it_accepts(tmp_path):
    p = _write(tmp_path, BASE)
    sc = load_scenario(p, {"allocator.kind": "static", "allocator.max_tokens": 4096}).scenario
    assert sc.allocator.kind == "static" and sc.allocator.max_tokens == 4096
    # static's S_max defaults to the model's context window or max_model_len
    r = resolve(load_scenario(p, {"allocator.kind": "static", "model": "llama-3-8b"}))
    assert r.allocator_options == {"max_tokens": 8192}


def test_errors_from_overrides_name_the_override(tmp_path):
    p = _write(tmp_path, BASE)
    with pytest.raises(ConfigError, match=r"^--set scheduler.max_num_seqs: scheduler"):
        load_scenario(p, parse_set(["scheduler.max_num_seqs=abc"]))
    with pytest.raises(ConfigError, match="no item 4"):
        load_scenario(p, parse_set(["workload.requests.4.count=1"]))
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        parse_set(["seed"])
    with pytest.raises(ConfigError, match="needs max_tokens"):
        resolve(load_scenario(p, {"allocator.kind": "static"}))


def test_pool_that_does_not_fit_is_an_error(tmp_path):
    text = BASE.replace(
        "  accelerator: e20-accelerator",
        "  accelerator: e20-accelerator\n  gpu_memory_utilization: 0.5",
    )
    assert "no memory left for KV" in _error(tmp_path, text)


def test_pool_and_kv_bytes_are_engine_totals(tmp_path):
    p = _write(
        tmp_path,
        BASE.replace("model: chapter-70b", "model: llama-3-70b").replace(
            "  accelerator: e20-accelerator", "  accelerator: h100-sxm-80gb\n  tp: 8"
        ),
    )
    r = resolve(load_scenario(p))
    assert r.kv_bytes_per_token == 327680  # 40,960 B per GPU x 8 (T2)
    per_gpu = 85899345920 * 0.9 - 70.6e9 * 2 / 8
    assert r.pool_bytes == pytest.approx(8 * per_gpu)


def test_json_schema_describes_every_section():
    schema = json_schema()
    json.dumps(schema)
    props = schema["properties"]
    for key in (
        "model",
        "hardware",
        "cost",
        "allocator",
        "scheduler",
        "pause_policy",
        "workload",
        "engine",
        "seed",
        "schema_version",
        "duration_s",
    ):
        assert key in props
    text = json.dumps(schema)
    for kind in ("radix", "paged", "vllm_v1", "poisson", "closed_loop", "lognormal"):
        assert f'"{kind}"' in text
