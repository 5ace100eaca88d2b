"""``trace-replay --recompute-last-token``: the engine's rule (at least one prompt token is
computed, whole blocks only), hand-computed; the engine itself is checked against it in
tests/workload/test_mooncake.py."""

from __future__ import annotations

import json

from sim.prefix.trace_replay import TraceRequest, replay

# (ids, input tokens): r4 repeats r1's blocks with a shorter last block; r6 repeats r5 whole
ROWS = [
    ([1, 2, 3], 1500),
    ([1, 2, 4], 1536),
    ([1, 2, 3, 5], 2000),
    ([6], 100),
    ([1, 2, 4], 1200),
    ([7, 8], 1024),
    ([7, 8], 1024),
]


def reqs(rows):
    return [TraceRequest(float(i), n, 1, tuple(ids)) for i, (ids, n) in enumerate(rows)]


def test_the_rule_caps_at_input_minus_one_and_keeps_whole_blocks():
    plain = replay(reqs(ROWS))
    rule = replay(reqs(ROWS), recompute_last_token=True)
    assert plain.hits == [0, 1024, 1536, 0, 1200, 0, 1024]
    # r4: 3 blocks match but 1,199 tokens may hit -> 2 whole blocks; r6: the whole prompt
    # is cached -> its last block is recomputed
    assert rule.hits == [0, 1024, 1536, 0, 1024, 0, 512]
    assert (rule.recompute_last_token, plain.recompute_last_token) == (True, False)
    # the rule changes what hits, never what is cached
    assert (rule.evicted_blocks, rule.peak_cached_tokens) == (
        plain.evicted_blocks,
        plain.peak_cached_tokens,
    )
    capped = replay(reqs(ROWS), cache_tokens=2048, recompute_last_token=True)
    assert capped.hits == [0, 1024, 1536, 0, 1024, 0, 512]


def test_the_rule_at_a_finer_block():
    rule = replay(reqs(ROWS), block_size=256, recompute_last_token=True)
    # r4: min(6 x 256, 1199) = 1199 -> 4 whole blocks of 256; r6: 1023 -> 3 blocks
    assert rule.hits == [0, 1024, 1536, 0, 1024, 0, 768]


def test_cli_flag(run_cli, tmp_path):
    path = tmp_path / "small.jsonl"
    path.write_text(
        "".join(
            json.dumps({"timestamp": i, "input_length": n, "output_length": 1, "hash_ids": ids})
            + "\n"
            for i, (ids, n) in enumerate(ROWS)
        )
    )
    args = ["trace-replay", str(path), "--format", "mooncake", "--json"]
    code, out, err = run_cli([*args, "--recompute-last-token"])
    assert code == 0, err
    data = json.loads(out)
    assert data["hit_tokens"] == 4096 and data["recompute_last_token"] is True
    code, out, _ = run_cli(args)
    assert json.loads(out)["hit_tokens"] == 4784
    assert json.loads(out)["recompute_last_token"] is False
    code, out, _ = run_cli([*args[:-1], "--recompute-last-token"])
    assert code == 0 and "recompute last token" in out
    code, out, _ = run_cli(["trace-replay", "--help"])
    text = " ".join(out.split())
    assert "--recompute-last-token" in text
    assert "floor(min(matched blocks x B, input_length - 1) / B) x B" in text
