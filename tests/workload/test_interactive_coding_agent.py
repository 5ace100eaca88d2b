"""``interactive_coding_agent`` reproduces the 487 Claude Code sessions it was fitted on.

The fixture (``workloads/fit/fixtures/interactive_coding_agent.json``, written by
``workloads/fit/claude_code.py`` from ``../shared/data``; never read here) holds each
observable's p10/p50/p90/p99 in the source and their bootstrap standard deviations over
sessions; a generated quantile passes within ``4 sd sqrt(1 + n_source / n_generated)``
plus one unit (token, call, 10 ms) or 2 % (docs/workloads.md, "Fit evidence").
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np
from pydantic import TypeAdapter

from sim.cli import main
from sim.workload.config import Workload
from sim.workload.interactive import session_observables
from sim.workload.observe import pooled, summary
from sim.workload.params import load_params
from sim.workload.sample import sample_workload

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = ROOT / "workloads/fit/fixtures/interactive_coding_agent.json"
KIND = "interactive_coding_agent"
N = 600
K = 4.0


def _cfg(n: int, **fields):
    data = {"kind": KIND, "num_trajectories": n, "arrival": {"kind": "fixed"}, **fields}
    return TypeAdapter(Workload).validate_python(data)


@lru_cache(maxsize=4)
def _sample(seed: int = 7, n: int = N) -> dict:
    return sample_workload(KIND, _cfg(n), seed, ROOT)


def test_generated_quantiles_match_the_sessions():
    fixture = json.loads(FIXTURE.read_text())
    got = session_observables(_sample()["trajectories"])
    misses = []
    assert fixture["trajectories"] == 487 and len(fixture["observables"]) >= 15
    for name, f in fixture["observables"].items():
        g = summary(pooled(got[name]))
        unit = 0.01 if "tool_s" in name else 1.0
        for q in ("p10", "p50", "p90", "p99"):
            tol = K * f["sd"][q] * math.sqrt(1 + fixture["trajectories"] / N) + max(
                unit, 0.02 * abs(f[q])
            )
            if abs(g[q] - f[q]) > tol:
                misses.append(f"{name} {q}: source {f[q]:.4g}, generated {g[q]:.4g} (+-{tol:.3g})")
    assert not misses, "\n".join(misses)


def test_human_pauses_are_minutes_to_hours_and_tool_pauses_seconds():
    fit = load_params(KIND)
    assert fit.think_s["human"].values[-1] > 10 * 3600  # the tail is kept to hours
    calls = [c for t in _sample()["trajectories"] for c in t["turns"] if c["branch_id"] == 0]
    human = np.array([c["tool_s"] for c in calls if c["pause_kind"] == "human"])
    tool = np.array([c["tool_s"] for c in calls if c["pause_kind"] == "tool"])
    assert 60 < np.median(human) < 180 and 5 < np.median(tool) < 15
    assert np.percentile(human, 99) > 3600 > np.percentile(tool, 90)
    # pause_kind names the pause tool_s measures: a user message follows a human one
    for t in _sample()["trajectories"][:50]:
        main = [c for c in t["turns"] if c["branch_id"] == 0]
        for a, b in zip(main, main[1:], strict=False):
            if a["pause_kind"] == "human":
                assert b["user_turn"] == a["user_turn"] + 1
            elif a["pause_kind"] == "tool":
                assert b["user_turn"] == a["user_turn"]
        assert main[-1]["pause_kind"] is None and main[-1]["tool_s"] is None


def test_subagents_run_as_children_and_can_be_turned_off():
    trajs = _sample()["trajectories"]
    subs = [c for t in trajs for c in t["turns"] if c["branch_id"] > 0]
    assert subs and all(c["parent_branch_id"] == 0 and c["pause_kind"] != "human" for c in subs)
    off = sample_workload(KIND, _cfg(100, subagents=False), 7, ROOT)["trajectories"]
    assert all(c["branch_id"] == 0 for t in off for c in t["turns"])


def test_prompts_mostly_extend_and_compactions_rebuild_from_the_shared_prefix():
    fit = load_params(KIND)
    main = [[c for c in t["turns"] if c["branch_id"] == 0] for t in _sample()["trajectories"]]
    deltas = np.array(
        [
            b["prompt_tokens"] - a["prompt_tokens"]
            for m in main
            for a, b in zip(m, m[1:], strict=False)
        ]
    )
    assert (deltas > 0).mean() > 0.9  # the next prompt is the previous one and more
    shrunk = sum(
        1
        for m in main
        for a, b in zip(m, m[1:], strict=False)
        if b["prompt_tokens"] < 0.5 * a["prompt_tokens"]
    )
    assert shrunk > 0  # compactions happen
    assert all(m[0]["prompt_tokens"] >= 2 for m in main) and fit.shared_prefix_tokens > 10_000


def test_sample_cli_json_carries_pause_kind(capsys):
    code = main(["workload", "sample", KIND, "--n", "3", "--seed", "2", "--json"])
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    calls = [c for t in out["trajectories"] for c in t["turns"]]
    assert {c["pause_kind"] for c in calls} <= {"tool", "human", None}
    assert set(calls[0]) >= {
        "prompt_tokens",
        "completion_tokens",
        "tool_s",
        "pause_kind",
        "branch_id",
    }
    a = sample_workload(KIND, _cfg(5), 3, ROOT)
    assert a == sample_workload(KIND, _cfg(5), 3, ROOT) != sample_workload(KIND, _cfg(5), 4, ROOT)


def test_fit_your_own_sessions_without_subagents(tmp_path, capsys):
    rows = [
        {"id": f"s{i}", "block_size": 4, "tool_tokens": 3, "system_tokens": 1, "requests": [
            {"t": 0, "in": 12, "out": 5, "hash_runs": [[1, 3]], "input_types": ["text"]},
            {"t": 9, "in": 20 + i, "out": 4, "hash_runs": [[1, 5]],
             "input_types": ["tool_result"], "think_time": 3.0 + i},
            {"t": 99, "in": 28 + i, "out": 2, "hash_runs": [[1, 7]], "input_types": ["text"],
             "think_time": 60.0},
        ]}
        for i in range(3)
    ]  # fmt: skip
    src = tmp_path / "mine.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "fit.yaml"
    code = main(["workload", "fit", str(src), "--kind", KIND, "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    fit = load_params(KIND, out)
    assert fit.subagents.spawn_share == 0 and fit.shared_prefix_tokens == 4
    assert fit.think_s["human"].values == [60.0] * len(fit.think_s["human"].values)
    cfg = _cfg(4, params={"path": str(out)})
    trajs = sample_workload(KIND, cfg, 1, ROOT)["trajectories"]
    assert all(c["branch_id"] == 0 for t in trajs for c in t["turns"])
    assert {c["tool_s"] for t in trajs for c in t["turns"] if c["pause_kind"] == "human"} == {60.0}
