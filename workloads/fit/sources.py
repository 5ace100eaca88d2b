"""The fitted sources, read from ``../shared/data`` and converted to the sample format.

Each ``*_trajectories`` function returns trajectories exactly as ``kvsim workload sample
--json`` lists them (``{"id", "turns": [{prompt_tokens, completion_tokens, tool,
tool_category, tool_s, branch_id, parent_branch_id, user_turn}]}``), so the source and a
generated sample are measured by the same code (``sim.workload.observe``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from sim.workload.fit import conversations, fold_categories, team_rounds
from sim.workload.turns_file import read_turns

#: kind -> (source path under the data folder, how the file names it, its licence)
SOURCES = {
    "coding_agent": (
        "swe_agent_deepseek/turns.jsonl",
        "SWE-agent/mini-swe-agent PR 816/814 output/deepseek_chat_test_1-100 (mini-swe-agent "
        "2.2.7, DeepSeek-chat, 99 SWE-bench tasks)",
        "MIT (mini-swe-agent repository)",
    ),
    "function_calling": (
        "bfcl_multiturn/steps.csv",
        "bbrowning/bfcl-vllm-results results/*/multi_turn (BFCL v4 multi-turn served by "
        "vLLM, gpt-oss-20b/120b)",
        "none stated for the results: fitted parameters only, no rows shipped",
    ),
    "human_in_loop": (
        "taubench_airline/messages.jsonl",
        "sierra-research/tau-bench historical_trajectories/gpt-4o-airline.json",
        "MIT (tau-bench)",
    ),
    "multi_agent_team": (
        "parrot_metagpt",
        "microsoft/ParrotServe artifact/workloads/metagpt (MetaGPT, GPT-4-32k)",
        "MIT (ParrotServe)",
    ),
}

#: the licence file of each source folder, copied beside the fitted parameters
LICENCE_FILES = {
    "coding_agent": "swe_agent_deepseek/LICENSE_mini-swe-agent.md",
    "function_calling": "bfcl_multiturn/LICENSE_gorilla",
    "human_in_loop": "taubench_airline/LICENSE",
    "multi_agent_team": "parrot_metagpt/LICENSE",
}


def _call(prompt, completion, tool=None, cat=None, tool_s=None, branch=0, parent=-1, user=0):
    return {
        "prompt_tokens": int(prompt),
        "completion_tokens": int(completion),
        "tool": tool,
        "tool_category": cat,
        "tool_s": None if tool_s is None or not np.isfinite(tool_s) else float(tool_s),
        "branch_id": branch,
        "parent_branch_id": parent,
        "user_turn": user,
    }


def coding_agent_trajectories(data: Path) -> list[dict]:
    trajs = read_turns(data / SOURCES["coding_agent"][0])
    cats = fold_categories(trajs)
    out = []
    for i, (key, calls) in enumerate(trajs.items()):
        turns = []
        for t, c in enumerate(calls):
            if t == len(calls) - 1:
                turns.append(_call(c.prompt_tokens, c.completion_tokens))
            else:
                turns.append(
                    _call(c.prompt_tokens, c.completion_tokens, c.tool, cats[key][t], c.tool_s)
                )
        out.append({"id": i, "turns": turns})
    return out


def function_calling_trajectories(data: Path) -> list[dict]:
    import pandas as pd

    d = pd.read_csv(data / SOURCES["function_calling"][0])
    d = d.sort_values(["run", "model", "id", "turn", "step"], kind="stable")
    out = []
    for i, (_, task) in enumerate(d.groupby(["run", "model", "id"], sort=False)):
        rows = task[["input_tokens", "output_tokens", "turn", "tool_calls"]].to_numpy()
        turns = []
        for j, (inp, outp, turn, tools) in enumerate(rows):
            if j + 1 == len(rows):
                turns.append(_call(inp, outp, user=int(turn)))
            elif rows[j + 1][2] == turn:
                name = str(tools).split("|")[0] if isinstance(tools, str) else "function"
                turns.append(_call(inp, outp, name, "function", user=int(turn)))
            else:
                turns.append(_call(inp, outp, "user", "user", user=int(turn)))
        out.append({"id": i, "turns": turns})
    return out


def human_in_loop_trajectories(data: Path) -> list[dict]:
    out = []
    for i, msgs in enumerate(conversations(data / SOURCES["human_in_loop"][0])):
        turns, prompt, user = [], 0, -1
        for j, m in enumerate(msgs):
            if m["role"] == "user":
                user += 1
            if m["role"] == "assistant":
                nxt = msgs[j + 1]["role"] if j + 1 < len(msgs) else None
                later = any(x["role"] == "assistant" for x in msgs[j + 1 :])
                if nxt == "tool" and later:
                    tool = (m.get("tool_names") or ["tool"])[0]
                    turns.append(_call(prompt, m["est_tokens"], tool, "tool", user=max(0, user)))
                elif later:
                    turns.append(_call(prompt, m["est_tokens"], "user", "user", user=max(0, user)))
                else:
                    turns.append(_call(prompt, m["est_tokens"], user=max(0, user)))
            prompt += int(m["est_tokens"])
        out.append({"id": i, "turns": turns})
    return out


def multi_agent_team_trajectories(data: Path) -> list[dict]:
    rounds = team_rounds(data / SOURCES["multi_agent_team"][0])
    arch = rounds[0][0]
    turns = [_call(arch["prompt"], arch["completion"])]
    branch = 1
    for calls in rounds[1:]:
        for c in calls:
            turns.append(_call(c["prompt"], c["completion"], branch=branch, parent=0))
            branch += 1
    return [{"id": 0, "turns": turns}]


TRAJECTORIES = {
    "coding_agent": coding_agent_trajectories,
    "function_calling": function_calling_trajectories,
    "human_in_loop": human_in_loop_trajectories,
    "multi_agent_team": multi_agent_team_trajectories,
}
