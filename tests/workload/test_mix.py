"""``mix``: several workloads on one engine, each with its own arrival process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import TypeAdapter, ValidationError

from sim.run import run_scenario
from sim.workload.config import MixWorkload, Workload

ROOT = Path(__file__).resolve().parents[2]
CHAT = str(ROOT / "workloads/chat_azure.yaml")
WORKLOAD = TypeAdapter(Workload)

CHAT_PART = {
    "kind": "chat",
    "num_requests": 5,
    "arrival": {"kind": "poisson", "rate_per_s": 2.0},
    "lengths": {"kind": "trace", "trace": "azure_conv"},
}
MOONCAKE_PART = {
    "kind": "mooncake",
    "num_requests": 3,
    "arrival": {"kind": "trace", "time_scale": 0.01},
}
AGENT_PART = {
    "kind": "agent",
    "num_trajectories": 2,
    "arrival": {"kind": "closed_loop", "concurrency": 2},
    "turns": 2,
    "system_prompt_tokens": 256,
    "tool_tokens": 128,
    "pause_s": 0.5,
}
REQUESTS_PART = {
    "kind": "requests",
    "requests": [{"count": 2, "at_s": 1.0, "prompt_tokens": 64, "output_tokens": 8}],
}


def run_mix(components: list[dict], names: list[str] | None = None, **over):
    workload = {"kind": "mix", "components": components}
    if names is not None:
        workload["names"] = names
    over.setdefault("engine.check_invariants", True)
    over.setdefault("model", "llama-3.1-8b")  # a window for the Mooncake prompts (40k)
    return run_scenario(CHAT, **{"workload": workload, **over})


def test_every_component_runs_with_unique_ids_and_its_name_in_the_tables():
    res = run_mix([CHAT_PART, MOONCAKE_PART, AGENT_PART, REQUESTS_PART])
    req, traj = res.requests, res.trajectories
    assert res.summary["trajectories_total"] == 5 + 3 + 2 + 2
    assert res.summary["trajectories_completed"] == 12
    # trajectory ids: one block per component, in component order
    assert traj.traj_id.tolist() == list(range(12))
    assert (
        traj.workload.tolist() == ["chat"] * 5 + ["mooncake"] * 3 + ["agent"] * 2 + ["requests"] * 2
    )
    assert traj.kind.tolist() == ["chat"] * 5 + ["mooncake"] * 3 + ["agent"] * 2 + ["request"] * 2
    assert req.req_id.is_unique and len(req) == 5 + 3 + 2 * 2 + 2
    by_traj = dict(zip(traj.traj_id, traj.workload, strict=True))
    assert [by_traj[t] for t in req.traj_id] == req.workload.tolist()
    moon = req[req.workload == "mooncake"]
    assert moon.prompt_tokens.tolist() == [40160, 36640, 23769]
    assert sorted(req[req.workload == "requests"].arrival_s) == [1.0, 1.0]


def test_a_component_draws_the_same_with_or_without_the_others():
    alone = run_mix([CHAT_PART], names=["web"]).requests
    # another Poisson chat draws from a stream of its own name, not from web's
    other = {
        **CHAT_PART,
        "num_requests": 3,
        "lengths": {
            "kind": "parametric",
            "prompt_tokens": {"kind": "uniform", "low": 10, "high": 900},
            "output_tokens": 5,
        },
    }
    mixed = run_mix([AGENT_PART, other, CHAT_PART], names=["bots", "other", "web"]).requests
    web = mixed[mixed.workload == "web"]
    assert web.arrival_s.tolist() == alone.arrival_s.tolist()
    assert web.prompt_tokens.tolist() == alone.prompt_tokens.tolist()
    assert web.traj_id.tolist() == [t + 5 for t in alone.traj_id]  # after 2 agents, 3 chats


def test_components_never_share_a_prefix_by_the_name_of_their_content():
    part = {**CHAT_PART, "num_requests": 2, "arrival": {"kind": "fixed", "interval_s": 10.0}}
    part["system_prompt_tokens"] = 48
    over = {"allocator": {"kind": "radix", "block_size": 16}}
    req = run_mix(
        [part, {**part, "arrival": {"kind": "fixed", "interval_s": 10.0, "start_s": 5.0}}], **over
    ).requests
    req = req.sort_values("arrival_s")
    # times 0 (a), 5 (b), 10 (a), 15 (b): each component's second request hits its own
    # system prompt (3 blocks), never the other's
    assert req.workload.tolist() == ["chat_0", "chat_1", "chat_0", "chat_1"]
    assert req.hit_tokens.tolist() == [0, 0, 48, 48]


def test_a_whole_trace_component_sets_its_count_when_read(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(
        "".join(
            json.dumps(
                {"timestamp": 100 * i, "input_length": 600, "output_length": 2, "hash_ids": [i, 99]}
            )
            + "\n"
            for i in range(4)
        )
    )
    res = run_mix([{"kind": "mooncake", "path": str(path)}, REQUESTS_PART])
    assert res.summary["trajectories_total"] == 6
    assert res.trajectories.workload.tolist() == ["mooncake"] * 4 + ["requests"] * 2
    assert res.trajectories.traj_id.tolist() == list(range(6))


def test_default_names_and_validation():
    cfg = WORKLOAD.validate_python(
        {"kind": "mix", "components": [CHAT_PART, CHAT_PART, MOONCAKE_PART]}
    )
    assert cfg.labels() == ["chat_0", "chat_1", "mooncake"]
    assert WORKLOAD.validate_python(cfg.model_dump(mode="json")) == cfg  # resolved config
    mix = {"kind": "mix", "components": [CHAT_PART]}
    for bad, message in (
        ({"components": []}, "at least 1 item"),
        ({"components": [mix]}, "cannot itself be a mix"),
        ({"names": ["a", "b"]}, "names has 2 entries for 1 components"),
        ({"components": [CHAT_PART, CHAT_PART], "names": ["a", "a"]}, "unique"),
        ({"names": ["has space"]}, "should match pattern"),
        ({"components": [{**CHAT_PART, "num_requests": 0}]}, "greater than or equal to 1"),
    ):
        with pytest.raises(ValidationError, match=message):
            MixWorkload.model_validate({**mix, **bad})
    for built in ([MixWorkload.model_validate(mix)], (mix,)):  # a built component, a tuple
        with pytest.raises(ValidationError, match="cannot itself be a mix"):
            MixWorkload(components=built)


def test_the_workload_examples_in_the_docs_validate():
    import yaml

    text = (ROOT / "docs/scenarios.md").read_text()
    blocks = [b.split("```", 1)[0] for b in text.split("```yaml\n")[1:]]
    workloads = [yaml.safe_load(b)["workload"] for b in blocks if b.startswith("workload:")]
    kinds = {WORKLOAD.validate_python(w).kind for w in workloads}
    assert {"chat", "mix", "requests"} <= kinds


def test_every_registered_workload_kind_can_be_a_component():
    from typing import get_args

    from sim.workload import WORKLOADS

    members = set(get_args(get_args(Workload)[0]))
    assert {k.config for name, k in WORKLOADS.items()} <= members
    fitted = {
        "kind": "coding_agent",
        "num_trajectories": 2,
        "arrival": {"kind": "poisson", "rate_per_s": 1.0},
        "turns": 3,
    }
    res = run_mix([fitted, REQUESTS_PART], names=["swe", "probe"])
    traj = res.trajectories
    assert traj.workload.tolist() == ["swe", "swe", "probe", "probe"]
    assert traj.traj_id.tolist() == [0, 1, 2, 3]
    assert set(res.requests[res.requests.workload == "swe"].traj_id) == {0, 1}


def test_a_components_errors_name_its_place_in_the_mix():
    from sim.errors import ConfigError

    with pytest.raises(
        ConfigError, match=r"workload\.components\.1\.num_requests: num_requests 9999"
    ):
        run_mix([REQUESTS_PART, {"kind": "mooncake", "num_requests": 9999}])
