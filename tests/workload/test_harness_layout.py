"""The harness layout in the engine (``workload.harness``, rule 3.8), the provider view
(``workload.provider_cache``) and ``prefill_tokens``: what each harness choice costs."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import simpy
from pydantic import TypeAdapter

from sim.errors import ConfigError
from sim.prefix.harness import EXAMPLE_SPEC, PERTURBATIONS
from sim.prefix.prompt import build_trajectory, tool_versions
from sim.prefix.spans import common_prefix, concat, n_tokens
from sim.run import run_scenario
from sim.workload import workload_kind
from sim.workload.config import Workload
from sim.workload.rng import Streams
from sim.workload.sample import DryNode, SampleContext

ROOT = Path(__file__).resolve().parents[2]
SWARM = str(ROOT / "workloads/agent_swarm.yaml")

#: the ``agent`` kind shaped like ``sim.prefix.harness.EXAMPLE_SPEC`` (8 tools of 256)
EXAMPLE_AGENT = {
    "kind": "agent",
    "arrival": {"kind": "fixed"},
    "system_prompt_tokens": 2048,
    "tool_tokens": 2048,
    "task_tokens": 256,
    "output_tokens": 128,
    "observation_tokens": 512,
    "pause_s": 1.0,
}


def _calls(workload: dict, n: int = 1, seed: int = 3) -> list:
    """The requests a workload submits (dry node: every call served at once), in order."""
    cfg = TypeAdapter(Workload).validate_python({"num_trajectories": n, **workload})
    env = simpy.Environment()
    ctx = SampleContext(env, DryNode(env, 131072), Streams(seed), ROOT, n, 131072)
    env.process(workload_kind(cfg.kind).driver(cfg, ctx))
    env.run()
    return [c.req for c in sorted(ctx.calls, key=lambda c: c.req.req_id)]


def _example(harness: dict, turns: int = 20) -> list:
    return _calls({**EXAMPLE_AGENT, "turns": turns, "harness": harness})


def _reuse_profile(prompts) -> list[tuple[int, int]]:
    """(prompt tokens, tokens shared with the previous prompt) per call: the reuse a
    layout allows, whatever its content ids are named."""
    out, prev = [], ()
    for p in prompts:
        out.append((n_tokens(p), common_prefix(prev, p)))
        prev = p
    return out


# ------------------------------------------------------------------- one builder
@pytest.mark.parametrize("name", [k for k in PERTURBATIONS if k != "unstable_order"])
def test_engine_prompts_follow_the_harness_study_rules(name):
    """The engine's ``agent`` prompts and ``sim.prefix.prompt.build_trajectory``'s have the
    same sizes and share the same prefixes call by call, for every perturbation (the
    random tool order aside: the two draw their orders from different seeds)."""
    changes = {**PERTURBATIONS[name][1], "summary_tokens": 1024}
    study = build_trajectory(replace(EXAMPLE_SPEC, **changes), 20)
    engine = _example(changes)
    assert _reuse_profile([r.content for r in engine]) == _reuse_profile(
        [p.segments for p in study]
    )


def test_all_knobs_off_is_the_append_only_prompt():
    """No knob on: each prompt is the previous prompt, its reply and the new input, on one
    KV sequence (the layout never runs)."""
    reqs = _example({"per_call_field_at": "end", "recent_turns": 5, "tool_definitions": 3})
    assert len({r.seq_id for r in reqs}) == 1
    for a, b in zip(reqs, reqs[1:], strict=False):
        held = concat(a.content, ((a.output_id, 0, 128),))  # the prompt and its reply
        assert common_prefix(held, b.content) == a.prompt_tokens + 128
        assert b.prompt_tokens == a.prompt_tokens + 128 + 512


def test_a_field_at_the_front_shares_nothing_and_moves_every_call():
    reqs = _example({"per_call_field_tokens": 16})
    fields = [r.content[0] for r in reqs]
    assert all(f[0].startswith("call:") and f[2] == 16 for f in fields)
    assert len({f[0] for f in fields}) == len(reqs)  # new content on every call
    assert len({r.seq_id for r in reqs}) == len(reqs)  # never an extension of the KV
    assert all(
        common_prefix(a.content, b.content) == 0 for a, b in zip(reqs, reqs[1:], strict=False)
    )


def test_a_field_at_the_end_keeps_the_prefix_up_to_the_last_input():
    reqs = _example({"per_call_field_tokens": 16, "per_call_field_at": "end"})
    assert all(r.content[-1][0].startswith("call:") for r in reqs)
    assert len({r.seq_id for r in reqs}) == len(reqs)  # the held KV has the old field
    for a, b in zip(reqs, reqs[1:], strict=False):
        # the old field goes: the reply that followed it is recomputed, nothing before it
        assert common_prefix(a.content, b.content) == a.prompt_tokens - 16
        assert b.prompt_tokens == a.prompt_tokens + 128 + 512


def test_tool_changes_move_the_line_only_when_a_definition_changes():
    reqs = _example({"tool_change_every": 5})
    seqs = [r.seq_id for r in reqs]
    moves = [t for t in range(1, len(reqs)) if seqs[t] != seqs[t - 1]]
    assert moves == [5, 10, 15]
    # call 5 changes definition 0: only the system prompt is shared with call 4
    assert common_prefix(reqs[4].content, reqs[5].content) == 2048
    # call 10 changes definition 1: the system prompt and definition 0 are shared
    assert common_prefix(reqs[9].content, reqs[10].content) == 2048 + 256
    assert tool_versions(8, 5, 17) == [1, 1, 1, 0, 0, 0, 0, 0]
    # fleet-wide content: a definition's id names its version
    assert reqs[12].content[1][0] == "tools:0:v1" and reqs[12].content[2][0] == "tools:1:v1"


def test_unstable_tool_order_is_seeded_per_trajectory():
    harness = {"unstable_tool_order": True, "tool_definitions": 4}
    a = _calls({**EXAMPLE_AGENT, "turns": 6, "harness": harness}, n=2)
    b = _calls({**EXAMPLE_AGENT, "turns": 6, "harness": harness}, n=2)
    orders = [tuple(s[0] for s in r.content[1:5]) for r in a]
    assert orders == [tuple(s[0] for s in r.content[1:5]) for r in b]  # deterministic
    assert all(sorted(o) == [f"tools:{i}:v0" for i in range(4)] for o in orders)
    assert len(set(orders)) > 3  # reordered from call to call
    assert all(r.content[0] == ("sys", 0, 2048) for r in a)


def test_compact_every_summarises_the_history_and_counts_it():
    reqs = _example({"compact_every": 10, "summary_tokens": 1024})
    # call 10: the stable zones, the summary, the last 2 replies/results and the new input
    assert reqs[10].prompt_tokens == 4096 + 1024 + 2 * (128 + 512) + 512
    assert reqs[10].content[2][0].startswith("summary:")
    assert reqs[10].seq_id != reqs[9].seq_id and reqs[11].seq_id == reqs[10].seq_id
    res = run_scenario(
        SWARM,
        workload={**EXAMPLE_AGENT, "num_trajectories": 2, "turns": 25,
                  "harness": {"compact_every": 10}},
    )  # fmt: skip
    assert res.trajectories.compactions.tolist() == [2, 2]
    assert res.summary["compactions"] == 4


def test_tool_knobs_on_a_kind_without_tools_is_one_line_error(run_cli):
    code, _, err = run_cli(
        ["kvsim", "validate", str(ROOT / "workloads/multi_agent_team.yaml"),
         "--set", "workload.harness.tool_change_every=3"]
    )  # fmt: skip
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "multi_agent_team prompts have no shared tool definitions" in err
    # an agent whose shared zones are all empty has none either (found when the run starts)
    with pytest.raises(ConfigError, match=r"workload\.harness: agent prompts have no"):
        run_scenario(
            SWARM,
            workload={**EXAMPLE_AGENT, "num_trajectories": 1, "turns": 2,
                      "system_prompt_tokens": 0, "tool_tokens": 0,
                      "harness": {"unstable_tool_order": True}},
        )  # fmt: skip


def test_bad_layout_values_are_refused_by_the_schema(run_cli, tmp_path):
    code, _, err = run_cli(
        ["kvsim", "validate", SWARM, "--set", "workload.harness.per_call_field_at=middle"]
    )
    assert code == 2 and "workload.harness.per_call_field_at" in err and "'front'" in err
    assert len(err.strip().splitlines()) == 1


# --------------------------------------------------------------- what it costs
def test_the_layout_moves_hit_rate_prefill_and_ttft():
    """Rule 3.8 through the engine: a timestamp at the front makes every prompt new (no
    hit, every token prefilled, slower first tokens); at the end it costs one reply per
    call; compaction loses the history's reuse at each summary."""
    over = {"workload.num_trajectories": 16}
    runs = {
        name: run_scenario(SWARM, **over, **{f"workload.harness.{k}": v for k, v in ch.items()})
        for name, ch in {
            "stable": {},
            "front": {"per_call_field_tokens": 16},
            "end": {"per_call_field_tokens": 16, "per_call_field_at": "end"},
            "compaction": {"compact_every": 4},
        }.items()
    }
    s = {k: r.summary for k, r in runs.items()}
    assert s["front"]["prefix_hit_rate"] == 0.0 and s["front"]["kv_reuse_rate"] == 0.0
    front = runs["front"].requests
    assert s["front"]["prefill_tokens"] == int(front.prompt_tokens.sum())  # all recomputed
    assert s["stable"]["prefill_tokens"] < s["end"]["prefill_tokens"] < s["front"]["prefill_tokens"]
    assert s["stable"]["prefill_tokens"] < s["compaction"]["prefill_tokens"]
    assert s["stable"]["ttft_s"]["mean"] < s["front"]["ttft_s"]["mean"]
    assert s["end"]["ttft_s"]["mean"] < s["front"]["ttft_s"]["mean"]
    assert s["compaction"]["compactions"] > 0 == s["stable"]["compactions"]
    for r in runs.values():
        assert r.summary["warnings"] == [] and r.summary["rejected"] == 0


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_every_knob_at_once_keeps_the_engine_invariants(kind):
    """Moves to new sequences (fields, tool changes, compaction) inside forks too."""
    layout = {"per_call_field_tokens": 16, "per_call_field_at": "end", "tool_change_every": 3,
              "compact_every": 5, "unstable_tool_order": True}  # fmt: skip
    res = run_scenario(
        SWARM,
        **{"workload.num_trajectories": 3, "workload.harness": layout, "allocator.kind": kind,
           "engine.check_invariants": True, "workload.fork.probability": 0.5},
    )  # fmt: skip
    assert res.summary["trajectories_completed"] == 3 and res.summary["warnings"] == []
    assert res.trajectories.branches.sum() > 0 and res.summary["compactions"] > 0


def test_prefill_tokens_count_every_computed_prompt_token():
    """Runs of steps advanced at once count their later chunks too: the fast path gives the
    exact mode's figure, which is the sum of the step table's."""
    over = {"workload.num_trajectories": 12}
    fast = run_scenario(SWARM, **over)
    exact = run_scenario(SWARM, **over, **{"engine.exact": True})
    assert fast.summary["prefill_tokens"] == exact.summary["prefill_tokens"]
    assert exact.summary["prefill_tokens"] == int(exact.steps.prefill_tokens.sum())
    assert int(fast.steps.prefill_tokens.sum()) < fast.summary["prefill_tokens"]
    r = fast.requests[fast.requests.admitted_s.notna()]
    assert fast.summary["prefill_tokens"] == int(
        (r.prompt_tokens - r.hit_tokens - r.held_tokens).sum()
    )


# ---------------------------------------------------------------- provider view
def test_provider_bill_by_hand():
    """Two calls of one trajectory through ``explicit-5m`` (breakpoints after the shared
    zones and at the end; reads at 0.10, writes at 1.25 of the input price)."""
    res = run_scenario(
        SWARM,
        workload={**EXAMPLE_AGENT, "num_trajectories": 1, "turns": 2, "tool_tokens": 0,
                  "provider_cache": {"preset": "explicit-5m", "input_usd_per_mtok": 1.0,
                                     "output_usd_per_mtok": 2.0}},
    )  # fmt: skip
    t = res.trajectories.iloc[0]
    # call 1: 2,048 + 256 tokens, all written; call 2: 2,944 tokens, the first 2,304 read
    assert t.provider_prompt_tokens == 2304 + 2944
    assert t.provider_cached_tokens == 2304
    assert t.provider_written_tokens == 2304 + 640
    usd = (2304 * 1.25 + 2304 * 0.10 + 640 * 1.25) * 1e-6 + 2 * 128 * 2e-6
    assert t.provider_bill_usd == pytest.approx(usd, rel=1e-12)
    assert res.summary["provider_hit_rate"] == pytest.approx(2304 / 5248, rel=1e-12)
    assert res.summary["provider_bill_usd"] == pytest.approx(usd, rel=1e-12)


def test_no_provider_view_no_bill():
    res = run_scenario(SWARM, **{"workload.num_trajectories": 4})
    assert res.summary["provider_hit_rate"] is None and res.summary["provider_bill_usd"] is None
    cols = ["provider_prompt_tokens", "provider_cached_tokens", "provider_written_tokens",
            "provider_bill_usd"]  # fmt: skip
    assert res.trajectories[cols].isna().all().all()


def test_provider_view_sums_trajectories_and_sees_the_layout():
    over = {"workload.num_trajectories": 8, "workload.provider_cache": {"preset": "automatic-5m"}}
    stable = run_scenario(SWARM, **over)
    front = run_scenario(SWARM, **over, **{"workload.harness.per_call_field_tokens": 16})
    t = stable.trajectories
    assert stable.summary["provider_bill_usd"] == pytest.approx(t.provider_bill_usd.sum())
    assert stable.summary["provider_hit_rate"] == pytest.approx(
        t.provider_cached_tokens.sum() / t.provider_prompt_tokens.sum()
    )
    assert 0.5 < stable.summary["provider_hit_rate"] <= 1.0
    assert front.summary["provider_hit_rate"] == 0.0
    assert front.summary["provider_bill_usd"] > stable.summary["provider_bill_usd"]
    # the view bills; it never changes what the engine does
    plain = run_scenario(SWARM, **{"workload.num_trajectories": 8})
    assert plain.requests.equals(stable.requests)
    assert not math.isnan(t.provider_bill_usd.iloc[0])


def test_unknown_provider_preset_names_the_choices(run_cli):
    code, _, err = run_cli(
        ["kvsim", "validate", SWARM, "--set", "workload.provider_cache.preset=cheap"]
    )
    assert code == 2 and "workload.provider_cache.preset" in err and "explicit-5m" in err


# ---------------------------------------------------------------- the shipped study
STUDY = str(ROOT / "workloads/harness_layout.yaml")
#: the docs table's rows checked here, with the knobs each row sets
STUDY_ROWS = {
    "stable prefix, append-only": {},
    "16-token timestamp at the front": {"workload.harness.per_call_field_tokens": 16},
    "compaction every 20 calls": {"workload.harness.compact_every": 20},
}


def _docs_row(label: str) -> list[str]:
    text = (ROOT / "docs/workloads.md").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith(f"| {label} |"))
    return [c.strip() for c in line.strip("|").split("|")][1:]


@pytest.mark.parametrize("label", list(STUDY_ROWS))
def test_the_docs_study_table_is_what_the_scenario_gives(label):
    s = run_scenario(STUDY, **STUDY_ROWS[label]).summary
    hit, reuse, prefill, ttft, sim_s, compactions, p_hit, bill = _docs_row(label)
    assert hit == f"{s['prefix_hit_rate']:.1%}".replace("%", " %")
    assert reuse == f"{s['kv_reuse_rate']:.1%}".replace("%", " %")
    assert prefill == f"{s['prefill_tokens']:,}"
    assert ttft == f"{s['ttft_s']['mean'] * 1e3:,.0f} / {s['ttft_s']['p99'] * 1e3:,.0f}"
    assert (sim_s, compactions) == (f"{s['sim_time_s']:,.0f}", str(s["compactions"]))
    assert p_hit == f"{s['provider_hit_rate']:.1%}".replace("%", " %")
    assert bill == f"{s['provider_bill_usd']:.2f}"
    assert s["warnings"] == [] and s["rejected"] == 0
