"""``kvsim trace-replay --model NAME``: the hybrid prefix-hit rule with a model's layer
groups. Exact hits on a hand-checked trace for a dense, a sliding-window, a chunked and two
state-space models; what is cached never changes; without --model the output is as before."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sim.prefix.replay_hit_rule import ModelHitRule, model_hit_rule
from sim.prefix.session_trace import load_sessions
from sim.prefix.trace_replay import MODEL_KEYS, TraceRequest, replay, replay_sessions

# Block size 4. c1 [1,2] (10 tokens), c2 [1,2,3,4] (17: reuses c1's 2 blocks), c3 [1,2,5]
# (13: diverges at its third block, reuses 2). The block table alone hits 0, 8, 8.
TRACE = {
    "id": "A",
    "block_size": 4,
    "requests": [
        {"t": 0, "in": 10, "out": 2, "hash_runs": [[1, 2]]},
        {"t": 5, "in": 17, "out": 3, "hash_runs": [[1, 4]]},
        {"t": 9, "in": 13, "out": 1, "hash_runs": [[1, 2], [5, 1]]},
    ],
}


def _sessions(tmp_path: Path):
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(TRACE) + "\n")
    return load_sessions(p)


@pytest.mark.parametrize(
    "model, mode, hits, limited_by",
    [
        ("llama-3.1-8b", "auto", [0, 8, 8], None),  # dense: every layer keeps every token
        ("gemma-3-27b", "auto", [0, 8, 8], None),  # sliding window 1024: with the table
        ("llama-4-scout-17b-16e", "auto", [0, 8, 8], None),  # chunked local attention
        ("nemotron-h-8b", "auto", [0, 8, 8], None),  # vLLM's all: a state at each boundary
        ("nemotron-h-8b", "none", [0, 0, 0], "mamba"),  # no saved state: no prefix hit
        # linear attention: vLLM's align is not modelled, so no saved state (warned)
        ("qwen3-next-80b-a3b", "auto", [0, 0, 0], "deltanet"),
    ],
)
def test_exact_hits_per_model(tmp_path, model, mode, hits, limited_by):
    plain = replay_sessions(_sessions(tmp_path))
    r = replay_sessions(_sessions(tmp_path), hit_rule=model_hit_rule(model, mode))
    assert plain.hits == [0, 8, 8] and r.hits == hits
    assert (r.model, r.table_hit_tokens, r.hits_limited_by) == (model, 16, limited_by)
    assert r.hit_tokens == sum(hits) and r.hit_rate == pytest.approx(sum(hits) / 40)
    lost = {} if limited_by is None else {limited_by: 16}
    assert r.hit_tokens_lost_by_group == lost


def test_the_rule_changes_hits_not_what_is_cached(tmp_path):
    for cache in (None, 8):
        plain = replay_sessions(_sessions(tmp_path), cache_tokens=cache)
        ssm = replay_sessions(
            _sessions(tmp_path), cache_tokens=cache,
            hit_rule=model_hit_rule("nemotron-h-8b", "none"),
        )
        same = ("evicted_blocks", "peak_cached_tokens", "calls_not_fitting")
        assert [getattr(ssm, k) for k in same] == [getattr(plain, k) for k in same]
        assert ssm.table_hit_tokens == plain.hit_tokens and ssm.hit_tokens == 0


def test_recompute_rule_applies_to_the_models_hit(tmp_path):
    dense = replay_sessions(
        _sessions(tmp_path), recompute_last_token=True, hit_rule=model_hit_rule("llama-3.1-8b")
    )
    assert dense.hits == replay_sessions(_sessions(tmp_path), recompute_last_token=True).hits


def test_without_a_model_the_output_keys_are_todays(tmp_path):
    plain = replay_sessions(_sessions(tmp_path)).to_dict()
    dense = replay_sessions(_sessions(tmp_path), hit_rule=model_hit_rule("llama-3.1-8b")).to_dict()
    assert not set(MODEL_KEYS) & set(plain)
    assert {k: v for k, v in dense.items() if k not in MODEL_KEYS} == plain
    assert dense["hit_tokens_lost_by_group"] == {} and dense["table_hit_tokens"] == 16


def test_mooncake_replay_takes_the_rule_too():
    reqs = [TraceRequest(0.0, 1000, 1, (1, 2)), TraceRequest(1.0, 1000, 1, (1, 2))]
    assert replay(reqs).hits == [0, 1000]
    r = replay(reqs, hit_rule=model_hit_rule("qwen3-next-80b-a3b"))
    assert r.hits == [0, 0] and r.table_hit_tokens == 1000 and r.hits_limited_by == "deltanet"


def test_a_window_longer_than_the_match_still_serves_it_and_answers_are_memoised():
    rule = ModelHitRule("x", (("swa", "sliding_window", 4096), ("ssm", "mamba", 0)))
    h = rule.hit(5, 64)
    assert (h.blocks, h.limited_by) == (0, "ssm") and rule.hit(5, 64) is h
    swa = ModelHitRule("y", (("swa", "sliding_window", 4096),))
    assert swa.hit(5, 64).blocks == 5 and swa.hit(0, 64).blocks == 0


def _cli(args: list[str], capsys) -> tuple[int, str]:
    from sim.cli import main

    code = main(args)
    got = capsys.readouterr()
    return code, got.out, got.err


def test_cli_names_the_limiting_group(tmp_path, capsys):
    p = tmp_path / "s.jsonl"
    p.write_text(json.dumps(TRACE) + "\n")
    base = ["trace-replay", str(p), "--format", "claude-code"]
    none = [*base, "--model", "nemotron-h-8b", "--mamba-cache-mode", "none"]
    code, text, err = _cli([*none, "--json"], capsys)
    assert code == 0, err
    out = json.loads(text)
    assert (out["hit_tokens"], out["table_hit_tokens"], out["hits_limited_by"]) == (0, 16, "mamba")
    assert "kvsim: warning: mamba_cache_mode none with prefix caching is a what-if" in err
    code, text, _ = _cli(none, capsys)
    assert code == 0 and "hits limited by    mamba (hit tokens lost: mamba 16)" in text
    code, text, err = _cli([*base, "--model", "no-such-model"], capsys)
    assert code == 2 and "unknown model 'no-such-model'" in err and "nemotron-h-8b" in err
    assert "Traceback" not in text + err
