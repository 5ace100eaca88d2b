"""Context windows as real servers and harnesses treat them: the window defaults to the
model's, requests beyond it are refused or cut, agents compact, truncate or stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.errors import ConfigError
from sim.prefix.spans import n_tokens, segments
from sim.run import run_scenario
from sim.scenario import load_scenario, resolve
from sim.workload.context_limit import ContextLimit, fit_window

WORKLOADS = Path(__file__).resolve().parents[2] / "workloads"

# sys 100 + tools 50 stable; task 30, a reply 20, an observation 40 of history (240 tokens)
CONTEXT = segments([("sys", 100), ("tools", 50), ("task", 30), ("o1", 20), ("obs1", 40)])


def fit(input_tokens: int, **limit):
    return fit_window(CONTEXT, 150, input_tokens, 300, ContextLimit(**limit), "summary")


def test_below_the_threshold_nothing_changes():
    # 240 + 30 = 270 = 0.9 x 300: not past the threshold
    got = fit(30)
    assert got.context == CONTEXT and not got.reduced
    assert fit_window(CONTEXT, 150, 10**6, None, ContextLimit(), "s").context == CONTEXT


def test_compact_replaces_everything_after_the_stable_zones_with_a_summary():
    got = fit(40)  # 280 > 270
    # history 90 tokens -> a summary of ceil(0.2 x 90) = 18 tokens, new content
    assert got.reduced
    assert got.context == segments([("sys", 100), ("tools", 50), ("summary", 18)])


def test_truncate_oldest_keeps_the_task_and_the_newest_items():
    got = fit(40, policy="truncate_oldest", ratio=0.5)
    # history 90 -> at most 45: the task stays, the reply goes, the observation stays
    assert got.context == segments([("sys", 100), ("tools", 50), ("task", 30), ("obs1", 40)])


def test_stop_and_exhaustion():
    assert fit(40, policy="stop").context is None
    # compacted to 168 tokens, + 132 new tokens leaves no room for one output token in 300
    got = fit(132)
    assert got.context is None and got.reduced
    assert fit(131).context is not None and n_tokens(fit(131).context) == 168


def _agent(policy: str = "compact", max_model_len: int | None = 2048, turns: int = 8) -> dict:
    scheduler = {"kind": "vllm_v1"}
    if max_model_len is not None:
        scheduler["max_model_len"] = max_model_len
    return {
        "schema_version": 1,
        "model": "llama-3-8b",
        "hardware": {"accelerator": "h100-sxm-80gb"},
        "scheduler": scheduler,
        "engine": {"check_invariants": True},
        "workload": {
            "kind": "agent",
            "num_trajectories": 1,
            "arrival": {"kind": "fixed"},
            "turns": turns,
            "system_prompt_tokens": 256,
            "tool_tokens": 256,
            "task_tokens": 256,
            "output_tokens": 64,
            "observation_tokens": 512,
            "pause_s": 1.0,
            "context_limit": {"policy": policy},
        },
    }


@pytest.mark.parametrize("kind", ["paged", "radix"])
def test_an_agent_compacts_near_the_window_and_completes(kind):
    res = run_scenario(_agent(), **{"allocator.kind": kind})
    req = res.requests
    # by hand: 768, +64+512 = 1344, then 1920 > 0.9 x 2048 = 1843.2 -> compact the
    # 1408 - 512 = 896 history tokens to 180: 512 + 180 + 512 = 1204; 1780; 2356 > 1843.2
    # -> 1332 history tokens -> 267: 1291; 1867 > 1843.2 -> 843 -> 169: 1193; 1769;
    # 2345 > 1843.2 -> 1321 -> 265: 1289
    assert req.prompt_tokens.tolist() == [768, 1344, 1204, 1780, 1291, 1193, 1769, 1289]
    assert (req.prompt_tokens + req.output_tokens <= 2048).all()
    assert req.finish_reason.tolist() == ["stop"] * 8
    traj = res.trajectories
    assert traj.status.tolist() == ["completed"] and traj.compactions.tolist() == [4]
    assert res.summary["compactions"] == 4 and res.summary["warnings"] == []
    if kind == "radix":  # the stable zones are served from the cache after a compaction
        assert req.hit_tokens.tolist()[2] == 512


def test_stop_ends_the_trajectory_with_context_exhausted():
    res = run_scenario(_agent("stop"))
    assert res.requests.prompt_tokens.tolist() == [768, 1344]
    assert res.trajectories.status.tolist() == ["context_exhausted"]
    s = res.summary
    assert s["trajectories_by_status"] == {"completed": 0, "failed": 0, "context_exhausted": 1}
    assert s["warnings"] == [
        "1 of 1 trajectories ended with their context exhausted (workload.context_limit)"
    ]


def test_the_window_defaults_to_the_models_and_a_larger_one_needs_allow_long_context():
    loaded = load_scenario(_agent(max_model_len=None))
    assert resolve(loaded).context_window_tokens == 8192  # llama-3-8b's max_context_tokens
    assert loaded.scenario.scheduler.max_model_len is None  # the caller's object is unchanged
    res = run_scenario(_agent(max_model_len=None))
    assert res.config["scheduler"]["max_model_len"] == 8192  # config.resolved.yaml has it
    with pytest.raises(ConfigError, match=r"scheduler.max_model_len: 16,384 exceeds llama-3-8b"):
        resolve(load_scenario(_agent(max_model_len=16384)))
    long = _agent(max_model_len=16384)
    long["scheduler"]["allow_long_context"] = True
    assert resolve(load_scenario(long)).context_window_tokens == 16384


def test_mass_rejection_is_a_warning_with_reasons():
    sc = {
        "schema_version": 1,
        "model": "llama-3-8b",
        "hardware": {"accelerator": "h100-sxm-80gb"},
        "workload": {
            "kind": "requests",
            "requests": [
                {"count": 3, "prompt_tokens": 9000, "output_tokens": 10},
                {"count": 1, "prompt_tokens": 8000, "output_tokens": 500},
            ],
        },
    }
    res = run_scenario(sc)
    s = res.summary
    assert s["rejected_by_reason"] == {
        "rejected_too_long": 3,
        "rejected_never_fits": 0,
        "rejected_by_router": 0,
    }
    assert res.requests.finish_reason.tolist() == ["rejected_too_long"] * 3 + ["length"]
    assert res.requests.output_tokens.tolist()[-1] == 192  # 8,000 + 192 = the window
    assert s["warnings"][0].startswith("3 of 4 requests (75.0%) were rejected")


def test_kvsim_run_prints_a_warning_block_and_exits_0(tmp_path):
    import yaml
    from typer.testing import CliRunner

    from sim.cli import app

    sc = _agent("stop")
    sc["engine"] = {"check_invariants": False}
    path = tmp_path / "stop.yaml"
    path.write_text(yaml.safe_dump(sc))
    res = CliRunner().invoke(app, ["run", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert res.exit_code == 0
    assert "WARNING: this run looks pathological (1 warning(s)):" in res.stderr
    assert "context exhausted" in res.stderr and res.stdout == ""
    assert (tmp_path / "out" / "summary.json").is_file()


def test_truncate_with_nothing_to_drop_changes_nothing():
    """Only the task and the newest item after the stable zones: nothing can be dropped, so
    the context is not 'reduced' (no compaction counted, no new KV sequence)."""
    context = segments([("sys", 100), ("tools", 50), ("task", 30), ("obs1", 60)])
    got = fit_window(context, 150, 50, 300, ContextLimit(policy="truncate_oldest"), "s")
    assert got.context == context and not got.reduced  # 290 > 270, but 291 fits 300
    # and when that still leaves no room, the context is exhausted without a reduction
    got = fit_window(context, 150, 200, 300, ContextLimit(policy="truncate_oldest"), "s")
    assert got.context is None and not got.reduced


def test_output_scale_multiplies_every_output_length():
    base = run_scenario(str(WORKLOADS / "chat_azure.yaml"), **{"workload.num_requests": 40})
    twice = run_scenario(
        str(WORKLOADS / "chat_azure.yaml"),
        **{"workload.num_requests": 40, "workload.lengths.output_scale": 2.0},
    )
    assert (twice.requests.max_output_tokens == 2 * base.requests.max_output_tokens).all()
    assert (twice.requests.prompt_tokens == base.requests.prompt_tokens).all()
