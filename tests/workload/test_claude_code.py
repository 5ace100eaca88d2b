"""The ``claude_code`` workload: recorded sessions replayed through the trajectory engine
(prompts from the block ids, timing modes, tool and human pauses, subagents the parent
waits for), and the shipped interactive-service scenario in its reduced CI variant."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pydantic import TypeAdapter

from sim.errors import ConfigError
from sim.prefix.session_trace import load_sessions
from sim.run import run_scenario
from sim.workload.config import Workload
from sim.workload.sample import sample_workload

ROOT = Path(__file__).resolve().parents[2]
SCENARIO = str(ROOT / "workloads/interactive_coding_service.yaml")
SHIPPED = ROOT / "workloads/data/claude_code/sessions.jsonl.gz"

# block size 4; zone = tools 6 + system 2. c1 extends c0 (grows 8 = reply 5 + input 3);
# a subagent (zone 4 + 1) returns at t=40; c2 grows 3 < c1's reply 4 (a 2-token tail kept);
# c3 (a user message) rewrites c2 after 3 blocks; c4 shrinks by one token (same blocks).
HAND = {
    "id": "hand",
    "block_size": 4,
    "tool_tokens": 6,
    "system_tokens": 2,
    "requests": [
        {"t": 0, "in": 12, "out": 5, "hash_runs": [[1, 3]], "input_types": ["text"],
         "think_time": 0, "api_time": 2.0},
        {"t": 10, "in": 20, "out": 4, "hash_runs": [[1, 5]], "input_types": ["tool_result"],
         "think_time": 3.0, "api_time": 1.5},
        {"t": 40, "type": "subagent", "subagent_type": "Explore", "tool_tokens": 4,
         "system_tokens": 1, "requests": [
             {"t": 0, "in": 9, "out": 2, "hash_runs": [[100, 2]], "input_types": ["text"],
              "think_time": 0},
             {"t": 4, "in": 14, "out": 1, "hash_runs": [[100, 3]],
              "input_types": ["tool_result"], "think_time": 2.5},
         ]},
        {"t": 45, "in": 23, "out": 1, "hash_runs": [[1, 5]], "input_types": ["tool_result"],
         "think_time": 30.0, "api_time": 1.0},
        {"t": 300, "in": 21, "out": 2, "hash_runs": [[1, 3], [9, 2]], "input_types": ["text"],
         "think_time": 200.0},
        {"t": 310, "in": 20, "out": 1, "hash_runs": [[1, 3], [9, 2]],
         "input_types": ["tool_result"], "think_time": 5.0},
    ],
}  # fmt: skip


def _file(tmp_path: Path, sessions=(HAND,)) -> Path:
    p = tmp_path / "sessions.jsonl"
    p.write_text("".join(json.dumps(s) + "\n" for s in sessions))
    return p


def _sample(n: int = 1, **fields) -> dict:
    cfg = {"kind": "claude_code", "num_trajectories": n, "arrival": {"kind": "fixed"}, **fields}
    cfg = TypeAdapter(Workload).validate_python(cfg)
    return sample_workload("claude_code", cfg, 0, ROOT)


def test_prompts_come_from_the_block_ids(tmp_path):
    calls = _sample(path=str(_file(tmp_path)))["trajectories"][0]["turns"]
    got = [(c["prompt_tokens"], c["completion_tokens"], c["branch_id"]) for c in calls]
    # main line, the subagent (branch 1) between c1 and c2, then the main line again
    assert got == [
        (12, 5, 0),
        (20, 4, 0),
        (9, 2, 1),
        (14, 1, 1),
        (23, 1, 0),
        (21, 2, 0),
        (20, 1, 0),
    ]
    assert [c["parent_branch_id"] for c in calls] == [-1, -1, 0, 0, -1, -1, -1]
    assert [c["user_turn"] for c in calls if c["branch_id"] == 0] == [0, 0, 0, 1, 1]


@pytest.mark.parametrize(
    "fields, main, sub",
    [
        # think_only: the recorded think time; after the subagent what follows its return
        ({}, [3.0, None, 200.0, 5.0, None], [2.5, None]),
        # original: the recorded gap between starts (the provider's time included)
        ({"timing": "original"}, [10.0, None, 255.0, 10.0, None], [4.0, None]),
        # api_scaled: previous api_time x 0.5 + think_time; without api_time, original
        (
            {"timing": "api_scaled", "api_time_scale": 0.5},
            [4.0, None, 200.5, 10.0, None],
            [4.0, None],
        ),
        ({"time_scale": 2.0, "max_pause_s": 100.0}, [6.0, None, 100.0, 10.0, None], [5.0, None]),
    ],
)
def test_timing_modes_as_the_upstream_tester_defines_them(tmp_path, fields, main, sub):
    calls = _sample(path=str(_file(tmp_path)), **fields)["trajectories"][0]["turns"]
    assert [c["tool_s"] for c in calls if c["branch_id"] == 0] == main
    assert [c["tool_s"] for c in calls if c["branch_id"] == 1] == sub
    kinds = [c["pause_kind"] for c in calls if c["branch_id"] == 0]
    assert kinds == ["tool", None, "human", "tool", None]  # None: a spawn or the end follows


def test_the_shipped_sessions_replay_their_recorded_prompts():
    sessions = load_sessions(SHIPPED)
    trajs = _sample(len(sessions))["trajectories"]
    for s, t in zip(sessions, trajs, strict=True):
        rec = sorted((max(2, c.prompt_tokens), max(1, c.output_tokens)) for c in s.calls())
        got = sorted((c["prompt_tokens"], c["completion_tokens"]) for c in t["turns"])
        assert got == rec, s.session_id
    spawned = {c["branch_id"] for t in trajs for c in t["turns"]}
    assert max(spawned) >= 3  # three subagents started together in one session


def _run(tmp_path, **over):
    over = {
        "workload.path": str(_file(tmp_path)),
        "workload.num_trajectories": 2,
        "workload.arrival.concurrency": 2,
        "engine.check_invariants": True,
        **over,
    }
    return run_scenario(SCENARIO, **over)


def test_the_parent_waits_for_its_subagents_and_pauses_are_tool_or_human(tmp_path):
    res = _run(tmp_path, **{"pause_policy.kind": "break_even"})
    r = res.requests.sort_values("req_id")
    for traj in (0, 1):
        t = r[r.traj_id == traj]
        sub = t[t.branch_id == 1]
        c2 = t[t.branch_id == 0].iloc[2]
        assert len(sub) == 2 and (sub.arrival_s >= t[t.branch_id == 0].iloc[1].finish_s).all()
        # the parent's next call: 5 s after its subagent returned
        assert c2.arrival_s == pytest.approx(sub.finish_s.max() + 5.0)
    # the pause policy sees minutes of a human and seconds of tools as different tools
    p = res.pauses
    assert set(p.tool_name) == {"tool", "human"}
    human = p[p.tool_name == "human"]
    # c3 rewrites the history: its line moves to a new sequence, ending the pause there
    assert ((human.ended_s - human.start_s).round(6) == 200.0).all() and len(human) == 2
    assert res.summary["trajectories_by_status"]["completed"] == 2


def test_the_shared_prefix_is_warm_across_sessions_unless_turned_off(tmp_path):
    # two one-call sessions with a 300-token zone (tools + system) and other tasks
    big = dict(HAND, tool_tokens=300, system_tokens=0)
    big["requests"] = [dict(HAND["requests"][0], **{"in": 400, "hash_runs": [[1, 100]]})]
    path = str(_file(tmp_path, [big, dict(big, id="b")]))

    def hits(warm: bool) -> list[int]:
        over = {"workload.path": path, "workload.num_trajectories": 2,
                "workload.arrival.concurrency": 1, "workload.warm_shared_prefix": warm}  # fmt: skip
        return run_scenario(SCENARIO, **over).requests.sort_values("req_id").hit_tokens.tolist()

    assert hits(True) == [0, 256]  # the 4 whole 64-token blocks of the shared 300 tokens
    assert hits(False) == [0, 0]  # each session's zone is its own


def test_bad_configs_are_one_line(tmp_path):
    with pytest.raises(Exception, match="timing"):
        _sample(path=str(_file(tmp_path)), timing="fast")
    with pytest.raises(ConfigError, match="harness"):
        _sample(path=str(_file(tmp_path)), harness={"per_call_field_tokens": 8})
    with pytest.raises(ConfigError, match="no such file"):
        _sample(path=str(tmp_path / "nope.jsonl"))


# --------------------------------------------------------------- the shipped scenario
def test_reduced_interactive_service_runs_clean_within_the_window():
    """CI's reduced variant: 6 sessions, 3 users, break_even with host and NVMe tiers."""
    res = run_scenario(
        SCENARIO,
        **{"workload.num_trajectories": 6, "workload.arrival.concurrency": 3,
           "pause_policy.kind": "break_even"},
    )  # fmt: skip
    s = res.summary
    assert s["warnings"] == [] and s["rejected"] == 0
    assert s["trajectories_by_status"]["completed"] == 6
    r = res.requests
    assert (r.finish_reason != "length").all()
    assert int((r.prompt_tokens + r.output_tokens).max()) <= 163_840 * 0.9
    assert s["prefix_hit_rate"] > 0.8  # prompts that extend the previous call
    decisions = set(res.pauses.decision)
    assert len(decisions) >= 1 and np.isfinite(s["ttft_s"]["p99"])
