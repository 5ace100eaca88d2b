"""``mooncake``: a block-hash trace replayed through the engine, checked against
``kvsim trace-replay``.

The equivalence: with arrivals spaced so that one request runs at a time, and the radix
cache's block equal to the trace's (512 tokens), the engine's hit tokens per request are
those of ``replay(..., recompute_last_token=True)`` (at least one prompt token computed,
whole blocks only):
- unbounded (a pool that never evicts), on the shipped trace itself;
- bounded at C blocks, on the shipped trace's prefix structure with whole-block prompts
  and one output token, with a pool of C blocks (eviction on a shortfall) or of C blocks
  plus the largest request with the watermark keeping that request's room free.
The exact remaining difference on the raw trace, bounded: the replay caches every hash id
as a whole block, the partial last one too, and nothing else; the engine caches only full
blocks, and the blocks that generated tokens fill; so the two evict different blocks.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from sim.errors import ConfigError, KvsimError
from sim.prefix.trace_replay import TraceRequest, load_mooncake, replay
from sim.run import build, run_scenario

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "workloads/data/mooncake/synthetic_trace.jsonl"
B = 512


def scenario(workload: dict, allocator: dict | None = None) -> dict:
    return {
        "schema_version": 1,
        "name": "mooncake",
        "model": "llama-3.1-8b",
        "hardware": {"accelerator": "h100-sxm-80gb"},
        "allocator": allocator or {"kind": "radix", "block_size": B},
        # the trace's longest prompt is 191,378 tokens
        "scheduler": {"kind": "vllm_v1", "max_model_len": 262_144, "allow_long_context": True},
        "workload": workload,
    }


def run_with_pool(workload: dict, pool_blocks: int, allocator: dict | None = None):
    sc = scenario(workload, allocator)
    kv_bytes_per_token = build(sc).resolved.kv_bytes_per_token
    sc["hardware"]["kv_pool_bytes_per_gpu"] = pool_blocks * B * kv_bytes_per_token
    sim = build(sc)
    assert sim.resolved.pool_bytes == pool_blocks * B * kv_bytes_per_token
    return sim.run()


def one_at_a_time(requests) -> bool:
    return bool((requests.admitted_s.to_numpy()[1:] > requests.finish_s.to_numpy()[:-1]).all())


def write_trace(path: Path, rows: list[TraceRequest]) -> Path:
    with path.open("w") as f:
        for r in rows:
            obj = {
                "timestamp": r.timestamp_ms,
                "input_length": r.input_length,
                "output_length": r.output_length,
                "hash_ids": list(r.hash_ids),
            }
            f.write(json.dumps(obj) + "\n")
    return path


def test_prompts_are_chained_512_token_spans_and_outputs_at_least_one(tmp_path):
    rows = [
        TraceRequest(0.0, 1100, 0, (5, 6, 7)),  # last block: 1100 - 1024 = 76 tokens
        TraceRequest(2000.0, 1024, 3, (5, 6)),
    ]
    path = write_trace(tmp_path / "t.jsonl", rows)
    sim = build(scenario({"kind": "mooncake", "path": str(path)}))
    seen = []
    submit = sim.node.submit
    sim.node.submit = lambda req: (seen.append(req), submit(req))[1]
    res = sim.run()
    assert [r.content for r in seen] == [
        ((5, 0, 512), (6, 0, 512), (7, 0, 76)),
        ((5, 0, 512), (6, 0, 512)),
    ]
    req = res.requests
    assert req.prompt_tokens.tolist() == [1100, 1024]
    assert req.max_output_tokens.tolist() == [1, 3]  # output_length 0 is generated as 1
    assert req.arrival_s.tolist() == [0.0, 2.0]  # the trace's timestamps, ms -> s
    # the second prompt is the first one's two whole blocks: all cached, the last recomputed
    assert req.hit_tokens.tolist() == [0, 512]
    assert set(req.workload) == {"mooncake"} and set(res.trajectories.kind) == {"mooncake"}


def test_unbounded_engine_hits_equal_trace_replay_with_the_engine_rule():
    rows = load_mooncake(SAMPLE)
    blocks = sum(-(-(r.input_length + r.output_length) // B) for r in rows)  # never evicts
    # 300 s apart: every request (at most 191k prompt tokens) ends before the next arrives
    workload = {"kind": "mooncake", "arrival": {"kind": "fixed", "interval_s": 300.0}}
    res = run_with_pool(workload, blocks)
    req = res.requests
    assert len(req) == len(rows) == 3993 and res.summary["trajectories_total"] == 3993
    assert one_at_a_time(req)
    engine = req.hit_tokens.to_numpy()
    rule = replay(rows, B, None, recompute_last_token=True)
    assert engine.tolist() == rule.hits
    assert rule.hit_tokens == 39_802_880
    plain = replay(rows, B, None)
    # without the rule the replay also counts the partial last block (and a prompt hit
    # whole): exactly the tokens past the last whole block below input_length
    expect = [
        min(h, r.input_length) - min(h, r.input_length - 1) // B * B
        for h, r in zip((p for p in plain.hits), rows, strict=True)
    ]
    assert (np.array(plain.hits) - engine).tolist() == expect
    assert plain.hit_tokens - rule.hit_tokens == 49_781


def whole_block_rows() -> list[TraceRequest]:
    """The shipped trace's prefix structure with whole-block prompts, one output token and
    arrivals 300 s apart."""
    return [
        TraceRequest(300_000.0 * i, B * len(r.hash_ids), 1, r.hash_ids)
        for i, r in enumerate(load_mooncake(SAMPLE))
    ]


@pytest.mark.parametrize("pool", ["capacity", "capacity_plus_one_request"])
def test_bounded_engine_hits_equal_trace_replay(tmp_path, pool):
    rows = whole_block_rows()
    path = write_trace(tmp_path / "whole.jsonl", rows)
    cap = 1000  # blocks: 512,000 tokens, far below the trace's working set
    largest = max(len(r.hash_ids) for r in rows)
    workload = {"kind": "mooncake", "path": str(path)}  # arrivals: the trace's timestamps
    if pool == "capacity":
        res = run_with_pool(workload, cap)
    else:
        allocator = {
            "kind": "radix",
            "block_size": B,
            "tau_low_blocks": largest,
            "target_free_blocks": largest,
        }
        res = run_with_pool(workload, cap + largest, allocator)
    req = res.requests
    assert one_at_a_time(req) and (req.finish_reason == "stop").all()
    rule = replay(rows, B, cap * B, recompute_last_token=True)
    assert req.hit_tokens.tolist() == rule.hits
    assert rule.hit_tokens == 5_242_368 and rule.evicted_blocks == 110_625


def test_arrivals_from_timestamps_scaled_or_at_a_rate():
    rows = load_mooncake(SAMPLE)[:6]
    ts = (np.array([r.timestamp_ms for r in rows]) - rows[0].timestamp_ms) / 1000.0
    wl = {"kind": "mooncake", "num_requests": 6, "arrival": {"kind": "trace", "time_scale": 2.0}}
    res = run_scenario(scenario(wl))
    assert res.requests.arrival_s.tolist() == pytest.approx((ts * 2.0).tolist(), abs=1e-9)
    wl["arrival"] = {"kind": "trace", "rate_per_s": 0.5}
    t = run_scenario(scenario(wl)).requests.arrival_s.to_numpy()
    assert t[-1] == pytest.approx(10.0) and t.tolist() == pytest.approx(
        (ts * 10.0 / ts[-1]).tolist()
    )
    wl = {"kind": "mooncake", "num_requests": 3, "start_row": 10}
    wl["arrival"] = {"kind": "poisson", "rate_per_s": 1.0}
    req = run_scenario(scenario(wl)).requests
    assert req.prompt_tokens.tolist() == [r.input_length for r in load_mooncake(SAMPLE)[10:13]]


def test_bad_traces_and_counts_are_one_line_errors(tmp_path):
    wl = {"kind": "mooncake", "num_requests": 4000}
    with pytest.raises(ConfigError, match="num_requests 4000 is more than the 3993 requests"):
        build(scenario(wl))
    with pytest.raises(ConfigError, match="start_row 3993 is past the trace's 3993 requests"):
        build(scenario({"kind": "mooncake", "start_row": 3993}))
    rows = [TraceRequest(5.0, 10, 1, (1,)), TraceRequest(1.0, 10, 1, (2,))]
    path = write_trace(tmp_path / "late.jsonl", rows)
    with pytest.raises(ConfigError, match="late.jsonl: timestamp: timestamps are not in time"):
        build(scenario({"kind": "mooncake", "path": str(path)}))
    path.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1}\n')
    with pytest.raises(ConfigError, match=r"late.jsonl:1: hash_ids"):
        build(scenario({"kind": "mooncake", "path": str(path)}))
    with pytest.raises(ConfigError, match="workload.path: no such file"):
        build(scenario({"kind": "mooncake", "path": str(tmp_path / "none.jsonl")}))
    (tmp_path / "bad.jsonl").write_bytes(b"\xff\xfe")
    with pytest.raises(KvsimError, match="bad.jsonl: cannot read trace"):
        build(scenario({"kind": "mooncake", "path": str(tmp_path / "bad.jsonl")}))


def test_a_request_out_of_time_order_is_named_as_the_trace_counts_it(tmp_path):
    """Timestamps 5, 3, 7 ms: the second request of the trace comes before the first; with
    ``start_row: 1`` the replay's first pair is the trace's requests 2 and 3, in order, and
    a fourth at 6 ms is request 4, before request 3 (review: the message said "request 1",
    an index into the replay, for the trace's second request)."""
    rows = [TraceRequest(ms, 10, 1, (i,)) for i, ms in enumerate((5.0, 3.0, 7.0))]
    path = write_trace(tmp_path / "t.jsonl", rows)
    want = r"request 2 of the trace, at 3\.0 ms, comes before request 1, at 5\.0 ms"
    with pytest.raises(ConfigError, match=want):
        build(scenario({"kind": "mooncake", "path": str(path)}))
    path = write_trace(tmp_path / "t.jsonl", [*rows, TraceRequest(6.0, 10, 1, (9,))])
    want = r"request 4 of the trace, at 6\.0 ms, comes before request 3, at 7\.0 ms"
    with pytest.raises(ConfigError, match=want):
        build(scenario({"kind": "mooncake", "path": str(path), "start_row": 1}))
