"""A line's context tokens counted by addition (``sim.workload.agent._context_tokens``): the
count the agent hands ``fit_window`` and puts on each request is the context's own
(``n_tokens``) through compaction, truncation, rebuilt contexts, forks, subagents,
harness layouts (a per-call field at the front or the end: the request's prompt is then a
rendered copy of the context, counted on its own) and replies kept shorter than
generated."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.prefix.spans import n_tokens
from sim.run import run_scenario
from sim.workload import agent
from sim.workload.context import WorkloadContext

WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"


def _agent(policy: str) -> dict:
    return {
        "schema_version": 1,
        "model": "llama-3-8b",
        "hardware": {"accelerator": "h100-sxm-80gb"},
        "scheduler": {"kind": "vllm_v1", "max_model_len": 2048},
        "allocator": {"kind": "radix"},
        "workload": {
            "kind": "agent", "num_trajectories": 2, "arrival": {"kind": "fixed"}, "turns": 10,
            "system_prompt_tokens": 256, "tool_tokens": 256, "task_tokens": 256,
            "output_tokens": 64, "observation_tokens": 512, "pause_s": 1.0,
            "context_limit": {"policy": policy},
        },
    }  # fmt: skip


CASES = {
    "compact": (_agent("compact"), {}),
    "truncate_oldest": (_agent("truncate_oldest"), {}),
    "layout-compaction": (WORKLOADS / "harness_layout.yaml",
                          {"workload.num_trajectories": 3, "workload.harness.compact_every": 4}),
    "layout-field-front": (WORKLOADS / "harness_layout.yaml",
                           {"workload.num_trajectories": 3, "workload.harness.per_call_field_tokens": 16}),
    "layout-field-end": (WORKLOADS / "harness_layout.yaml",
                         {"workload.num_trajectories": 3, "workload.harness.per_call_field_tokens": 16,
                          "workload.harness.per_call_field_at": "end"}),
    "tree_search": (WORKLOADS / "tree_search_h100.yaml", {"workload.num_trajectories": 1}),
    "multi_agent_team": (WORKLOADS / "multi_agent_team.yaml", {"workload.num_trajectories": 2}),
    # replies kept shorter than they were (the next call's input grows by less)
    "function_calling": (WORKLOADS / "function_calling_h200.yaml", {"workload.num_trajectories": 4}),
}  # fmt: skip


@pytest.mark.parametrize("case", list(CASES))
def test_the_counted_context_is_the_contexts_own(monkeypatch, case):
    scenario, sets = CASES[case]
    fitted, counted, prompts = [], [], []
    real_fit, real_count = agent.fit_window, agent._context_tokens

    def fit(context, *args, total_tokens=None, **kwargs):
        assert total_tokens == n_tokens(context)
        fitted.append(total_tokens)
        return real_fit(context, *args, total_tokens=total_tokens, **kwargs)

    def count(line, context):
        remembered = line.counted[0] is context
        tokens = real_count(line, context)
        assert tokens == n_tokens(context) and line.counted == (context, tokens)
        counted.append(remembered)
        return tokens

    real_request = WorkloadContext.request

    def request(self, seq, prompt_tokens, output_tokens, content, **kwargs):
        assert prompt_tokens == n_tokens(content)  # the count each request is made with
        prompts.append(prompt_tokens)
        return real_request(self, seq, prompt_tokens, output_tokens, content, **kwargs)

    monkeypatch.setattr(agent, "fit_window", fit)
    monkeypatch.setattr(agent, "_context_tokens", count)
    monkeypatch.setattr(WorkloadContext, "request", request)
    res = run_scenario(scenario, **sets)
    assert fitted and res.summary["warnings"] == []
    assert len(prompts) == res.summary["requests_submitted"]
    # counts by addition; the rest (a line's first call, a rebuilt, compacted or forked
    # context) a pass over the segments: most of them where lines are long
    assert any(counted)
    if case != "multi_agent_team":  # its subagents' lines are a few calls long
        assert sum(counted) > len(counted) / 2
    if case in ("compact", "truncate_oldest", "layout-compaction"):
        assert res.summary["compactions"] > 0
