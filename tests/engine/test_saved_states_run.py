"""``model.mamba_cache_mode`` in runs (issue 27 item 2): the memory of saved states at
block boundaries, the hits they serve, and the located refusals.

Expected figures are written out from nemotron-h-8b's config.json numbers (the profile's
comment), not taken from the code: 4 attention layers of 2 x 8 x 128 x 2 B = 16,384 B per
token; 24 Mamba2 layers of 2,158,592 B of state = 51,806,208 B per running state; under
``all`` vLLM's block is the Mamba chunk (128) times ceil(2,158,592 / 4,096 / 128) = 640
tokens, and each saved state takes a page padded to the attention page, 640 x 4,096 =
2,621,440 B (``MambaSpec.page_size_bytes`` returns ``page_size_padded``), so one block
holds 4 x 2,621,440 + 24 x 2,621,440 = 73,400,320 B.
"""

from __future__ import annotations

import pytest
import yaml

from sim.errors import ConfigError
from sim.run import run_scenario
from sim.scenario.load import load_scenario
from sim.scenario.resolve import make_allocator_for, resolve

BLOCK_ALL = 640
STATE_PAGE = 640 * 4_096  # one saved state's page, padded to the attention page
BLOCK_BYTES_ALL = 4 * STATE_PAGE + 24 * STATE_PAGE  # 73,400,320


def _scenario(tmp_path, mode: str | None, kind: str = "radix", model: str = "nemotron-h-8b",
              extra: dict | None = None) -> str:  # fmt: skip
    """A one-request scenario; ``mode`` None leaves the key out (its default, auto)."""
    doc = {
        "schema_version": 1,
        "name": "saved_states",
        "seed": 0,
        "model": {"profile": model, **({} if mode is None else {"mamba_cache_mode": mode})},
        "hardware": {"accelerator": "h200-141gb", "tp": 1, "kv_pool_bytes_per_gpu": 20e9},
        "allocator": {"kind": kind, "block_size": 16},
        "scheduler": {"kind": "vllm_v1"},
        "workload": {
            "kind": "requests",
            "requests": [{"count": 1, "at_s": 0.0, "prompt_tokens": 8180, "output_tokens": 12}],
        },
        **(extra or {}),
    }
    path = tmp_path / f"{mode}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return str(path)


def _allocator(tmp_path, mode):
    return make_allocator_for(resolve(load_scenario(_scenario(tmp_path, mode))))


def test_one_request_run_charges_a_state_per_block(tmp_path):
    s = run_scenario(_scenario(tmp_path, "all"), **{"engine.check_invariants": True}).summary
    assert s["requests_completed"] == 1
    assert s["block_size_tokens"] == BLOCK_ALL
    assert s["allocator_kv_bytes_per_token"] == pytest.approx(BLOCK_BYTES_ALL / BLOCK_ALL)
    # 8,192 tokens in ceil(8192 / 640) = 13 blocks, each with its end's states
    assert s["peak_allocated_bytes"] == pytest.approx(13 * BLOCK_BYTES_ALL)
    # by group: the attention layers' 13 blocks, and the 24 state layers' states at the end
    # of each of the 13 blocks (no drafter: nothing is left over)
    assert s["peak_allocated_bytes_by_group"] == {
        "attention": 13 * 640 * 16_384, "mamba": 13 * 24 * STATE_PAGE}
    assert "prefix_hit_limited_by" not in s
    assert s["mamba_cache_mode"] == "all"


def test_one_request_in_none_mode_is_as_before(tmp_path):
    s = run_scenario(_scenario(tmp_path, "none")).summary
    assert "mamba_cache_mode" not in s  # none adds no key
    # a what-if vLLM would not run with prefix caching: said in the summary's warnings
    assert any("vLLM runs nemotron-h-8b in all" in w for w in s["warnings"])
    assert s["block_size_tokens"] == 528  # the page unification without prefix caching
    assert s["prefix_hit_limited_by"] == "mamba"
    # 16 table blocks of 528 x 16,384 B, the running state in ceil(51,806,208 / 8,650,752)
    # = 6 blocks more
    assert s["peak_allocated_bytes"] == pytest.approx((16 + 6) * 528 * 16_384)


def test_two_requests_share_the_saved_states(tmp_path):
    a = _allocator(tmp_path, "all")
    r = a.allocate("a", 1300, content=[("sys", 1300)])
    assert r.ok and r.matched_tokens == 0
    assert a.metrics().allocated_bytes == 3 * BLOCK_BYTES_ALL  # ceil(1300 / 640) blocks
    a.free("a")
    # its two full blocks stay cached with the states at their ends; the partial one goes
    m = a.metrics()
    assert (m.allocated_bytes, m.cached_bytes) == (0, 2 * BLOCK_BYTES_ALL)
    r = a.allocate("b", 1500, content=[("sys", 1300), ("b", 200)])
    assert r.matched_tokens == 2 * BLOCK_ALL  # the state at the end of block 1 serves
    assert a.metrics().allocated_bytes == 3 * BLOCK_BYTES_ALL
    a.check_invariants()


def test_two_requests_without_saved_states_hit_nothing(tmp_path):
    a = _allocator(tmp_path, "none")
    a.allocate("a", 1300, content=[("sys", 1300)])
    a.free("a")
    assert a.metrics().cached_bytes == 0  # nothing is cached: no state to resume from
    r = a.allocate("b", 1500, content=[("sys", 1300), ("b", 200)])
    assert r.ok and r.matched_tokens == 0


@pytest.mark.parametrize(
    ("mode", "kind", "model", "words"),
    [
        ("align", "radix", "nemotron-h-8b", "align is not modelled"),
        ("all", "paged", "nemotron-h-8b", "needs a prefix-caching allocator"),
        ("all", "paged_hash", "qwen3-next-80b-a3b", "falls back to align"),
    ],
)
def test_refused_in_one_located_line(tmp_path, mode, kind, model, words):
    path = _scenario(tmp_path, mode, kind, model)
    with pytest.raises(ConfigError) as exc:
        resolve(load_scenario(path))
    msg = str(exc.value)
    assert words in msg and "\n" not in msg
    assert f"{path}:" in msg and "model.mamba_cache_mode" in msg


@pytest.mark.parametrize(("mode", "words"), [("none", "switches such a model to align"),
                                             ("auto", "switches such a model to align"),
                                             ("all", "under mamba_cache_mode all")])  # fmt: skip
def test_speculative_refusal_names_the_mode(tmp_path, mode, words):
    spec = {"speculative": {"method": "mtp", "num_speculative_tokens": 2, "acceptance_rate": 0.7}}
    with pytest.raises(ConfigError) as exc:
        resolve(load_scenario(_scenario(tmp_path, mode, extra=spec)))
    msg = str(exc.value)
    assert words in msg and "vllm-project/vllm#26201" in msg and "\n" not in msg


@pytest.mark.parametrize(("mode", "state_bytes"), [
    ("none", 4000 * 16_384 + 24 * 2_158_592),  # the table's tokens and one running state
    ("all", 4000 * 16_384 + 4000 / 640 * 24 * STATE_PAGE),  # a block's states per 640 tokens
])  # fmt: skip
def test_a_pause_sees_the_saved_states(tmp_path, mode, state_bytes):
    agent = {"kind": "agent", "num_trajectories": 1, "arrival": {"kind": "fixed"}, "turns": 2,
             "system_prompt_tokens": 0, "tool_tokens": 0, "task_tokens": 4000,
             "output_tokens": 1, "observation_tokens": 512, "pause_s": 45.0}  # fmt: skip
    path = _scenario(tmp_path, mode, extra={"pause_policy": {"kind": "hold"}, "workload": agent})
    r = run_scenario(path, **{"engine.check_invariants": True})
    (p,) = r.pauses.itertuples()
    assert p.tokens == 4000 and p.state_bytes == pytest.approx(state_bytes, rel=1e-12)


@pytest.mark.parametrize(("mode", "hits", "peak"), [
    # none: nothing cached; turn 2 holds ceil(4514 / 528) = 9 table blocks + 6 for its state
    ("none", [0, 0], (9 + 6) * 528 * 16_384),
    # all: turn 1's 4,001 tokens left floor(4001 / 640) = 6 full blocks, with their states,
    # cached; turn 2 (4,513 prompt tokens) hits them and peaks at ceil(4514 / 640) = 8 blocks
    ("all", [0, 6 * 640], 8 * BLOCK_BYTES_ALL),
])  # fmt: skip
def test_two_request_run_resumes_from_saved_states(tmp_path, mode, hits, peak):
    agent = {"kind": "agent", "num_trajectories": 1, "arrival": {"kind": "fixed"}, "turns": 2,
             "system_prompt_tokens": 0, "tool_tokens": 0, "task_tokens": 4000,
             "output_tokens": 1, "observation_tokens": 512, "pause_s": 45.0}  # fmt: skip
    extra = {"pause_policy": {"kind": "recompute"}, "workload": agent}  # turn 1 is freed
    r = run_scenario(_scenario(tmp_path, mode, extra=extra), **{"engine.check_invariants": True})
    assert list(r.requests["hit_tokens"]) == hits
    assert r.summary["peak_allocated_bytes"] == pytest.approx(peak)


def test_the_default_follows_vllm(tmp_path):
    # a prefix cache on a Mamba model: vLLM runs all, and so does the default (auto)
    s = run_scenario(_scenario(tmp_path, None)).summary
    assert s["mamba_cache_mode"] == "all" and s["block_size_tokens"] == BLOCK_ALL
    assert s["peak_allocated_bytes"] == pytest.approx(13 * BLOCK_BYTES_ALL)
    assert s["warnings"] == []
    # no prefix cache: none, and no key
    s = run_scenario(_scenario(tmp_path, None, kind="paged")).summary
    assert "mamba_cache_mode" not in s and s["warnings"] == []


def test_linear_attention_falls_back_to_none_with_a_warning(tmp_path):
    r = resolve(load_scenario(_scenario(tmp_path, None, model="qwen3-next-80b-a3b")))
    assert r.mamba_cache_mode == "none" and r.saved_state_bytes_per_token == 0
    (w,) = r.warnings
    assert "align" in w and "under-estimate" in w and "\n" not in w


def test_all_on_a_dense_model_is_ignored(tmp_path):
    # vLLM ignores the flag for a model without state layers (a capacity --vary over
    # models with all set must not fail on the dense one)
    r = resolve(load_scenario(_scenario(tmp_path, "all", model="llama-3.1-8b")))
    assert (r.mamba_cache_mode, r.saved_state_bytes_per_token, r.warnings) == ("none", 0.0, ())


def test_validate_counts_the_pool_in_what_the_allocator_charges(tmp_path, run_cli):
    path = _scenario(tmp_path, "all")
    code, out, _ = run_cli(f"kvsim validate {path}")
    # 20 GB over 73,400,320 B per 640 tokens (the table's and the saved states' bytes)
    assert code == 0 and f"({20e9 / (BLOCK_BYTES_ALL / 640):,.0f} tokens)" in out
    code, _, err = run_cli(f"kvsim validate {_scenario(tmp_path, 'none')}")
    assert code == 0 and "kvsim: warning: mamba_cache_mode none with prefix caching" in err


def test_run_says_the_what_if_once_and_not_as_pathological(tmp_path, run_cli):
    out = tmp_path / "out"
    code, _, err = run_cli(f"kvsim run {_scenario(tmp_path, 'none')} --out {out} --quiet "
                           "--no-report")  # fmt: skip
    assert code == 0
    assert err.count("kvsim: warning: mamba_cache_mode none with prefix caching") == 1
    assert "pathological" not in err
    import json

    (w,) = json.loads((out / "summary.json").read_text())["warnings"]
    assert w.startswith("mamba_cache_mode none with prefix caching is a what-if")


def test_a_cluster_summary_lists_its_nodes_what_ifs_once(tmp_path):
    path = _scenario(tmp_path, "none", extra={"cluster": {"nodes": [{"count": 2}]}})
    s = run_scenario(path).summary
    assert [w[:45] for w in s["warnings"]] == ["mamba_cache_mode none with prefix caching is "]


def test_a_warning_said_before_the_run_is_not_said_again_as_pathological(capsys):
    """``kvsim run`` prints the configuration's warnings (every node group's of a cluster)
    before the run; the pathological block after it leaves out all of them, not only node
    0's."""
    from types import SimpleNamespace

    from sim.cli.run import _after_run

    what_if = "mamba_cache_mode none with prefix caching is a what-if (node group 2)"
    result = SimpleNamespace(summary={"warnings": [what_if, "mass rejection"]})
    _after_run(result, [what_if])
    err = capsys.readouterr().err
    assert "mass rejection" in err and what_if not in err
    _after_run(result)
    assert what_if in capsys.readouterr().err
