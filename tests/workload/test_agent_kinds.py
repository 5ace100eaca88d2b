"""The agent kinds through the engine: nested forks, branch ids, tool categories, replays,
and ``kvsim workload sample`` listing exactly the calls a run submits."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from pydantic import TypeAdapter

from sim.cli import main
from sim.run import run_scenario
from sim.workload.agent_trace import sample_path
from sim.workload.config import Workload
from sim.workload.params import load_params
from sim.workload.sample import sample_workload
from sim.workload.turns_file import read_turns

ROOT = Path(__file__).resolve().parents[2]
SWARM = str(ROOT / "workloads/agent_swarm.yaml")


def _run(workload: dict, **over):
    over = {
        "workload": {"num_trajectories": 3, "arrival": {"kind": "fixed"}, **workload},
        "allocator.kind": "radix",
        "hardware.kv_pool_bytes_per_gpu": 8e9,
        "engine.check_invariants": True,
        **over,
    }
    return run_scenario(SWARM, **over)


def _sample(workload: dict, seed: int = 7, window: int | None = 131072) -> dict:
    cfg = {"num_trajectories": 3, "arrival": {"kind": "fixed"}, **workload}
    cfg = TypeAdapter(Workload).validate_python(cfg)
    return sample_workload(cfg.kind, cfg, seed, ROOT, window)


def _calls_by_traj(requests) -> dict[int, Counter]:
    out: dict[int, Counter] = {}
    for r in requests.itertuples():
        out.setdefault(r.traj_id, Counter())[
            (r.prompt_tokens, r.output_tokens, r.branch_id, r.parent_branch_id)
        ] += 1
    return out


def _sample_by_traj(sample: dict) -> dict[int, Counter]:
    return {
        t["id"]: Counter(
            (c["prompt_tokens"], c["completion_tokens"], c["branch_id"], c["parent_branch_id"])
            for c in t["turns"]
        )
        for t in sample["trajectories"]
    }


TREE = {"kind": "tree_search", "depth": 2, "fan_out": 3, "prune_probability": 0.5}


def test_tree_search_nests_forks_prunes_and_continues_from_the_winner():
    res = _run(TREE, seed=5)
    traj, req = res.trajectories, res.requests
    assert (traj.status == "completed").all() and (traj.depth == 2).all()
    assert traj.pruned.sum() > 0 and (traj.branches >= 3 + traj.pruned).all()
    assert (req.status == "finished").all()
    for _, mine in req.groupby("traj_id"):
        branches = mine[mine.branch_id > 0]
        # unique ids; each branch's parent is the main line or a depth-1 branch
        assert branches.groupby("branch_id").depth.nunique().eq(1).all()
        parents = set(branches.parent_branch_id)
        depth_of = dict(zip(branches.branch_id, branches.depth, strict=False))
        assert all(p == 0 or depth_of[p] == 1 for p in parents)
        assert set(branches.depth) == {1, 2}
        assert (branches.parent_branch_id[branches.depth == 1] == 0).all()
        main_line = mine[mine.branch_id == 0]
        assert (main_line.depth == 0).all() and (main_line.parent_branch_id == -1).all()
        assert len(main_line) == 2  # pre_turns 1 and post_turns 1
    # every sequence was freed: nothing stays allocated once the workload ended
    assert res.memory.num_sequences.iloc[-1] == 0


def test_sample_lists_exactly_the_calls_the_engine_submits():
    for workload in (TREE, {"kind": "coding_agent", "turns": 8}, {"kind": "human_in_loop"}):
        res = _run(workload, seed=3)
        assert _calls_by_traj(res.requests) == _sample_by_traj(_sample(workload, seed=3))


def test_coding_agent_passes_tool_categories_to_the_pause_policy():
    res = _run({"kind": "coding_agent", "turns": 10}, seed=2)
    cats = set(load_params("coding_agent").categories)
    pauses = res.pauses
    assert len(pauses) > 0 and set(pauses.tool_name) <= cats
    assert len(set(pauses.tool_name)) >= 2


def test_multi_agent_team_rounds_share_their_prompt_through_the_prefix_cache():
    res = _run({"kind": "multi_agent_team", "rounds": 3}, seed=1)
    req, traj = res.requests, res.trajectories
    fit = load_params("multi_agent_team")
    assert (traj.status == "completed").all() and (traj.requests == 1 + 3 * fit.branches).all()
    assert (traj.branches == 3 * fit.branches).all() and (traj.depth == 1).all()
    rounds = req[req.branch_id > 0]
    # branches of one round share the role prompt and the round's context: most hit
    assert (rounds.hit_tokens > 1000).mean() > 0.5
    assert res.memory.num_sequences.iloc[-1] == 0


def test_agent_trace_replays_the_recorded_prompts():
    recorded = list(read_turns(sample_path()).values())
    sample = _sample({"kind": "agent_trace", "num_trajectories": len(recorded)}, window=None)
    for traj, calls in zip(sample["trajectories"], recorded, strict=True):
        assert [c["prompt_tokens"] for c in traj["turns"]] == [c.prompt_tokens for c in calls]
        assert [c["completion_tokens"] for c in traj["turns"]] == [
            c.completion_tokens for c in calls
        ]
        assert [c["tool_s"] for c in traj["turns"][:-1]] == [
            max(0.0, c.tool_s) for c in calls[:-1]
        ]


def test_agent_trace_rebuilds_a_prompt_that_shrank(tmp_path):
    rows = [
        {"instance_id": "a", "turn": 0, "prompt_tokens": 500, "completion_tokens": 50, "tool_s": 1},
        {"instance_id": "a", "turn": 1, "prompt_tokens": 900, "completion_tokens": 60, "tool_s": 2},
        {"instance_id": "a", "turn": 2, "prompt_tokens": 300, "completion_tokens": 70},
    ]
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    got = _sample({"kind": "agent_trace", "path": str(trace), "num_trajectories": 1})
    assert [c["prompt_tokens"] for c in got["trajectories"][0]["turns"]] == [500, 900, 300]


def test_a_scenario_sample_applies_the_models_window(capsys):
    window = 16384
    code = main(
        [
            "workload", "sample", SWARM, "--n", "4", "--seed", "1", "--json",
            "--set", "workload={kind: coding_agent, num_trajectories: 1, arrival: {kind: fixed}}",
            "--set", f"scheduler.max_model_len={window}",
        ]
    )  # fmt: skip
    assert code == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) == {"kind", "seed", "trajectories"} and out["kind"] == "coding_agent"
    assert len(out["trajectories"]) == 4
    calls = [c for t in out["trajectories"] for c in t["turns"]]
    assert set(calls[0]) == {
        "prompt_tokens", "completion_tokens", "tool", "tool_category", "tool_s", "branch_id",
        "parent_branch_id", "user_turn", "pause_kind",
    }  # fmt: skip
    # the harness compacts at 90 % of the window: no prompt passes it
    assert max(c["prompt_tokens"] for c in calls) <= 0.9 * window
    # the same kind alone has no window: its longer trajectories pass 16k
    code = main(["workload", "sample", "coding_agent", "--n", "4", "--seed", "1", "--json"])
    free = json.loads(capsys.readouterr().out)
    assert max(c["prompt_tokens"] for t in free["trajectories"] for c in t["turns"]) > window


@pytest.mark.parametrize(
    "argv, message",
    [
        (["nope"], "neither a scenario file nor a workload kind"),
        (["coding_agent", "--n", "0"], "--n must be in"),
        (["coding_agent", "--set", "turns=-3"], "workload.turns"),
        (["coding_agent", "--set", "colour=red"], "workload.colour: unknown field"),
        (["chat", "--set", "num_requests=2", "--set",
          "lengths={kind: parametric, prompt_tokens: 5, output_tokens: 5}"], "not one"),
    ],
)  # fmt: skip
def test_sample_errors_are_one_line(argv, message, capsys):
    assert main(["workload", "sample", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and err.startswith("kvsim: error:")


def test_fit_a_users_logs_and_sample_with_them(tmp_path, capsys):
    rows = []
    for traj in range(30):
        prompt = 1000 + traj
        for t in range(6):
            last = t == 5
            cat = ("view", "edit", "test")[t % 3]
            rows.append(
                {
                    "instance_id": f"task{traj}",
                    "turn": t,
                    "prompt_tokens": prompt,
                    "completion_tokens": 100 + t,
                    "tool_s": None if last else 0.5 * (t % 3 + 1),
                    "tool": cat,
                    "tool_cat": cat,
                    "cache_hit_tokens": 256 if t == 0 else 900,
                }
            )
            prompt += 100 + t + 40 * (t + 1)
    logs = tmp_path / "logs.jsonl"
    logs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    params = tmp_path / "mine.yaml"
    assert main(["workload", "fit", str(logs), "--kind", "coding_agent", "--out", str(params)]) == 0
    assert "30 trajectories, 180 calls" in capsys.readouterr().out
    fit = load_params("coding_agent", params)
    assert fit.system_prompt_tokens == 256 and set(fit.categories) == {"view", "edit", "test"}
    assert fit.turns.values[0] == fit.turns.values[-1] == 6
    # a chain fitted on view -> edit -> test -> view repeats it
    assert fit.categories["view"].next == {"edit": 1.0}
    got = _sample({"kind": "coding_agent", "params": {"path": str(params)}}, window=None)
    for traj in got["trajectories"]:
        assert [c["tool_category"] for c in traj["turns"]] == [
            "view", "edit", "test", "view", "edit", None
        ]
        assert [c["tool_s"] for c in traj["turns"][:3]] == [0.5, 1.0, 1.5]


def test_fit_errors_name_file_line_and_field(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"instance_id": "a", "turn": 0, "prompt_tokens": 10, "completion_tokens": 5}\n'
                   '{"instance_id": "a", "turn": 1, "prompt_tokens": "many", "completion_tokens": 5}\n')
    out = tmp_path / "p.yaml"
    assert main(["workload", "fit", str(bad), "--kind", "coding_agent", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert f"{bad}:2: prompt_tokens: expected a number" in err and len(err.splitlines()) == 1
    assert main(["workload", "fit", str(bad), "--kind", "chess", "--out", str(out)]) == 2
    assert "unknown fitted workload kind 'chess'" in capsys.readouterr().err


_TURN = '{"instance_id": "a", "turn": %d, "prompt_tokens": 10, "completion_tokens": 5%s}\n'


@pytest.mark.parametrize(("kind", "name", "text", "message"), [
    ("coding_agent", "t.jsonl", _TURN % (0, ', "tool_s": -5.0') + _TURN % (1, ""),
     ":1: tool_s: -5.0 is out of range [-2, 1e9] s"),
    ("coding_agent", "t.jsonl", _TURN % (0, ', "tool_s": NaN'), ":1: tool_s: expected seconds, got nan"),
    ("coding_agent", "t.jsonl", _TURN % (0, "") + (_TURN % (1, "")).replace("5}", "-5}"),
     ":2: completion_tokens: expected a whole number in [1, "),
    ("human_in_loop", "m.jsonl",
     '{"task_id": 1, "trial": 0, "idx": 0, "role": "system", "est_tokens": 50}\n\n'
     '{"task_id": 1, "trial": 0, "idx": 1, "role": "user", "est_tokens": -3}\n',
     ":3: est_tokens: expected a whole number in [0, "),
    ("function_calling", "steps.csv",
     "run,model,id,turn,step,input_tokens,output_tokens,tool_calls\n"
     "r,m,1,0,0,100,20,f\nr,m,1,0,1,130,nan,\n", ":3: output_tokens: expected a whole number"),
    ("coding_agent", "junk.jsonl", b"\xff\xfe\x00\x00abc\n",
     ":1: not UTF-8 text (a binary file?): byte 0xff at column 1"),
    ("human_in_loop", "junk.jsonl", b'{"a": 1}\n\x00\x00\x00\x7b\xf1\n',
     ":2: not UTF-8 text (a binary file?): byte 0xf1 at column 5"),
    ("function_calling", "junk.csv", b"run,model\n\xff\xfe\x00",
     ": not UTF-8 text (a binary file?): byte 0xff"),
])  # fmt: skip
def test_fit_refuses_negative_nan_and_binary_input_in_one_line(tmp_path, capsys, kind, name,
                                                               text, message):  # fmt: skip
    src = tmp_path / name
    src.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "p.yaml"
    assert main(["workload", "fit", str(src), "--kind", kind, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"kvsim: error: {src}{message}") and err.count("\n") == 1, err
    assert "codec" not in err and not out.exists()


def test_fit_keeps_clock_skew_of_a_second_out_of_the_tool_times(tmp_path, capsys):
    rows = "".join(_TURN % (t, f', "tool_s": {s}') for t, s in enumerate([-1.1, 2.0, 4.0]))
    src = tmp_path / "skew.jsonl"
    src.write_text(rows + _TURN % (3, ""))
    out = tmp_path / "p.yaml"
    assert main(["workload", "fit", str(src), "--kind", "coding_agent", "--out", str(out)]) == 0
    fit = load_params("coding_agent", out)
    tool = fit.categories["other"].tool_s.values  # (fewer than 20 calls: pooled)
    assert min(tool) == 2.0 and max(tool) == 4.0  # -1.1 s dropped as skew, not clipped to 0


def test_the_manual_agent_numbers_branches_uniquely_across_its_forks():
    fork = {"probability": 1.0, "branches": 3, "branch_turns": 2, "mode": "join"}
    res = _run({"kind": "agent", "turns": 3, "fork": fork}, seed=1)
    for _, mine in res.requests.groupby("traj_id"):
        branches = mine[mine.branch_id > 0]
        assert sorted(set(branches.branch_id)) == [1, 2, 3, 4, 5, 6]  # two forks of three
        assert sorted(set(branches.branch)) == [1, 2, 3]  # the index within its fork
        assert (branches.depth == 1).all() and (branches.parent_branch_id == 0).all()
    assert (res.trajectories.depth == 1).all() and (res.trajectories.pruned == 0).all()


def test_a_params_file_is_found_next_to_the_scenario(tmp_path, capsys):
    import shutil

    from sim.workload.params import shipped_path

    shutil.copyfile(shipped_path("coding_agent"), tmp_path / "fit.yaml")
    text = Path(SWARM).read_text().split("workload:")[0]
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        text + "workload: {kind: coding_agent, num_trajectories: 2, turns: 4,\n"
        "  arrival: {kind: fixed}, params: {path: fit.yaml}}\n"
    )
    res = run_scenario(str(scenario))
    assert (res.trajectories.status == "completed").all() and len(res.requests) == 8
    (tmp_path / "fit.yaml").unlink()
    assert main(["validate", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert "workload.params.path: no such file: fit.yaml" in err
