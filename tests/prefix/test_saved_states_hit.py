"""Saved states of state-space layers (``mamba_cache_mode``, issue 27 item 2): the hybrid
hit rule with states saved at block boundaries, the modes' refusals, and the trace replay's
``--mamba-cache-mode``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.errors import KvsimError
from sim.prefix.hybrid_hit import (
    RULES,
    HitGroup,
    longest_hit,
    mamba_cache_mode_problem,
    settle_mamba_cache_mode,
)
from sim.prefix.replay_hit_rule import model_hit_rule
from sim.prefix.trace_replay import TraceRequest, replay

B = 16
T, F = True, False


@pytest.mark.parametrize("k", range(0, 7))
def test_a_state_saved_at_boundary_k_hits_k_blocks(k):
    # the table caches 6 blocks; the only saved state is at the end of block k - 1
    saved = [i == k - 1 for i in range(6)]
    hit = longest_hit([HitGroup("table", "full", [T] * 6), HitGroup("m", "mamba", saved)], B, 6)
    assert (hit.blocks, hit.tokens) == (k, k * B)
    assert hit.limited_by == (None if k == 6 else "m")


def test_the_last_saved_boundary_wins():
    saved = [F, T, F, T, F, F]  # states at the ends of blocks 1 and 3
    hit = longest_hit([HitGroup("table", "full", [T] * 6), HitGroup("m", "mamba", saved)], B, 6)
    assert hit.blocks == 4
    # the table stops at block 2: the state at the end of block 1 serves
    hit = longest_hit([HitGroup("table", "full", [T, T, T, F, T, T]), HitGroup("m", "mamba", saved)],
                      B, 6)  # fmt: skip
    assert (hit.blocks, hit.limited_by) == (2, "m")


@pytest.mark.parametrize(("mode", "blocks"), [("none", 0), ("all", 5)])
def test_model_rule_none_gives_nothing_all_gives_the_table(mode, blocks):
    rule = model_hit_rule("nemotron-h-8b", mode)
    hit = rule.hit(5, B)
    assert (hit.blocks, hit.tokens) == (blocks, blocks * B)
    assert hit.limited_by == ("mamba" if mode == "none" else None)


@given(st.lists(st.lists(st.booleans(), min_size=7, max_size=7), min_size=1, max_size=5),
       st.lists(st.sampled_from(sorted(RULES)), min_size=5, max_size=5),
       st.integers(0, 7), st.sampled_from([17, 40, 64]))  # fmt: skip
def test_hit_never_exceeds_any_groups_own_answer(cached_lists, kinds, max_blocks, window):
    groups = [HitGroup(f"g{i}", kinds[i], c, window) for i, c in enumerate(cached_lists)]
    hit = longest_hit(groups, B, max_blocks)
    for g in groups:
        own = RULES[g.kind](g, min(max_blocks, len(g.cached)), B)
        assert hit.blocks <= own  # no group is asked to serve more than it can alone
        assert RULES[g.kind](g, hit.blocks, B) >= hit.blocks  # and each serves the hit


@pytest.mark.parametrize(
    ("mode", "model", "words"),
    [
        ("align", "nemotron-h-8b", "align is not modelled"),
        ("all", "qwen3-next-80b-a3b", "falls back to align"),
        ("most", "nemotron-h-8b", "is not one of auto, none, all, align"),
    ],
)
def test_modes_vllm_does_not_run_are_refused(mode, model, words):
    from sim.profiles import load_model

    kinds = [g.kind for g in load_model(model).kv_groups()]
    problem = mamba_cache_mode_problem(mode, model, kinds)
    assert problem is not None and words in problem and "\n" not in problem
    with pytest.raises(KvsimError, match="--mamba-cache-mode: "):
        model_hit_rule(model, mode)


def test_none_and_all_are_fine_where_vllm_runs_them():
    assert mamba_cache_mode_problem("none", "llama-3.1-8b", ["full"]) is None
    assert mamba_cache_mode_problem("all", "nemotron-h-8b", ["full", "mamba"]) is None


def test_linear_attention_refusal_points_at_auto():
    problem = mamba_cache_mode_problem("all", "qwen3-next-80b-a3b", ["full", "linear_attention"])
    assert "use auto" in problem and "use none" not in problem


MAMBA, LINEAR, DENSE = ["full", "mamba"], ["full", "linear_attention"], ["full"]


@pytest.mark.parametrize(("mode", "kinds", "caches", "held", "warned"), [
    # vLLM's MambaModelConfig.verify_and_update_config: no prefix cache -> none
    ("auto", MAMBA, False, "none", None),
    ("auto", LINEAR, False, "none", None),
    ("none", MAMBA, False, "none", None),
    # a prefix cache: none -> all for a Mamba model ...
    ("auto", MAMBA, True, "all", None),
    ("all", MAMBA, True, "all", None),
    # ... and align for linear attention: not modelled, so none, an under-estimate
    ("auto", LINEAR, True, "none", "an under-estimate of vLLM's"),
    # an explicit none with a prefix cache: a what-if vLLM would not run
    ("none", MAMBA, True, "none", "vLLM runs m in all"),
    ("none", LINEAR, True, "none", "vLLM runs m in align"),
    # a model without state layers: vLLM ignores the flag
    ("all", DENSE, True, "none", None),
    ("all", DENSE, False, "none", None),
    ("align", DENSE, True, "none", None),
])  # fmt: skip
def test_the_mode_settles_as_vllm_settles_it(mode, kinds, caches, held, warned):
    got, warning = settle_mamba_cache_mode(mode, "m", kinds, caches)
    assert got == held
    if warned is None:
        assert warning is None
    else:
        assert warned in warning and "\n" not in warning and "0" in warning


def test_all_without_a_prefix_cache_is_refused():
    with pytest.raises(KvsimError, match="needs a prefix-caching allocator"):
        settle_mamba_cache_mode("all", "m", MAMBA, False)


def test_replay_default_is_what_vllm_runs():
    assert model_hit_rule("nemotron-h-8b").saved_states
    assert model_hit_rule("nemotron-h-8b").warning is None
    rule = model_hit_rule("qwen3-next-80b-a3b")
    assert not rule.saved_states and "under-estimate" in rule.warning
    dense = model_hit_rule("llama-3.1-8b", "all")  # ignored for a dense model
    assert not dense.saved_states and dense.warning is None


def _trace():
    # three calls of one conversation (Mooncake hash ids, 512-token blocks): each extends
    # the previous prompt; the third shares only the first two blocks of the second
    return [
        TraceRequest(0, 3 * 512, 10, (1, 2, 3)),
        TraceRequest(1, 5 * 512, 10, (1, 2, 3, 4, 5)),
        TraceRequest(2, 4 * 512, 10, (1, 2, 9, 10)),
    ]


@pytest.mark.parametrize(("mode", "hits"), [("none", [0, 0, 0]), ("all", [0, 1536, 1024])])
def test_replay_hits_call_by_call(mode, hits):
    r = replay(_trace(), block_size=512, hit_rule=model_hit_rule("nemotron-h-8b", mode),
               cache_tokens=None)  # fmt: skip
    assert r.hits == hits
    d = r.to_dict()
    assert d["mamba_cache_mode"] == mode and d["table_hit_tokens"] == 2560
    assert d["hits_limited_by"] == ("mamba" if mode == "none" else None)


def test_cli_flag(tmp_path, run_cli):
    import json

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(
        json.dumps({"timestamp": i, "input_length": r.input_length, "output_length": 10,
                    "hash_ids": list(r.hash_ids)}) + "\n" for i, r in enumerate(_trace())))  # fmt: skip
    code, out, _ = run_cli(f"kvsim trace-replay {trace} --format mooncake --model nemotron-h-8b "
                           "--mamba-cache-mode all --json")  # fmt: skip
    assert code == 0
    d = json.loads(out)
    assert (d["hit_tokens"], d["mamba_cache_mode"], d["hits_limited_by"]) == (2560, "all", None)
    code, out, _ = run_cli(f"kvsim trace-replay {trace} --format mooncake --model nemotron-h-8b "
                           "--json")  # fmt: skip
    assert code == 0 and json.loads(out)["mamba_cache_mode"] == "all"  # auto, as vLLM
    code, out, err = run_cli(f"kvsim trace-replay {trace} --format mooncake "
                             "--model qwen3-next-80b-a3b --json")  # fmt: skip
    assert code == 0 and json.loads(out)["mamba_cache_mode"] == "none"
    assert "kvsim: warning: " in err and "under-estimate" in err
    code, _, err = run_cli(f"kvsim trace-replay {trace} --format mooncake --mamba-cache-mode all")
    assert code != 0 and "needs --model" in err and "Traceback" not in err
    code, _, _ = run_cli(f"kvsim trace-replay {trace} --format mooncake --mamba-cache-mode none")
    assert code == 0  # the former default stays accepted without --model
    code, _, err = run_cli(f"kvsim trace-replay {trace} --format mooncake --model nemotron-h-8b "
                           "--mamba-cache-mode align")  # fmt: skip
    assert code != 0 and "align is not modelled" in err
