"""Pause policies through the engine (issue 6): E24 on exact timelines, every policy
on an agent swarm with invariants checked, the tiers' capacity, the gate, config errors."""

from __future__ import annotations

import math
from typing import Literal

import pytest
from engine_helpers import WORKLOADS, assert_same_frame, assert_same_summary, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sim.policy.base as policy_registry
from sim.engine.pauses import PauseLifecycle
from sim.errors import ConfigError, InvariantError, KvsimError
from sim.memory.tiers import BlockFrame, Tier
from sim.policy import Decision, PrefetchPlan, policy_names, resume_timeline
from sim.policy.fixed import Hold
from sim.run import build, run_scenario

E24 = "seed_tool_wait_45s.yaml"
PEAK = 989.4e12  # H100 SXM bf16, the accelerator profile
KV_TOKENS = 32768
KV_BYTES = KV_TOKENS * 2 * 80 * 8 * 128 * 2  # F1, Llama-3.1-70B bf16: 10.74 GB
RELOAD_S = KV_BYTES / 8 / 64e9  # each of 8 GPUs moves its share at 64 GB/s: 20.97 ms
RECOMPUTE_S = 2 * 70.6e9 * KV_TOKENS / (8 * 0.45 * PEAK)  # F30 linear term, 45 % MFU
NVME_S = KV_BYTES / (8 * 7.0e9) + RELOAD_S  # drives (8 x 7 GB/s) then the link


def e24(kind: str, **more):
    r = run(E24, **{"pause_policy.kind": kind}, **more)
    assert len(r.pauses) == 1
    return r, r.pauses.iloc[0]


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def test_e24_hold():
    r, p = e24("hold")
    assert p.decision == "hold" and p.tokens == KV_TOKENS and p.state_bytes == KV_BYTES
    assert close(p.start_s, RECOMPUTE_S)  # the first turn's 32,768-token prefill
    assert close(p.tool_return_s, p.start_s + 45.0) and close(p.actual_wait_s, 45.0)
    assert p.resume_stall_s == 0.0
    assert math.isnan(p.copy_out_done_s) and math.isnan(p.blocks_freed_s)
    assert close(p.paused_hbm_gb_s, KV_BYTES * 45.0 / 1e9)  # ~483 GB*s
    s = r.summary
    assert close(s["paused_hbm_gb_s"], 483.1838208) and s["pause_count"] == 1
    assert s["pause_decisions"] == {"hold": 1} and s["bytes_offloaded"] == 0.0


def test_e24_recompute():
    _, hold = e24("hold")
    r, p = e24("recompute")
    assert p.decision == "recompute" and p.paused_hbm_gb_s == 0.0
    assert close(p.resume_stall_s, RECOMPUTE_S)  # ~1.30 s: four 8,192-token chunks
    assert 1.29 < p.resume_stall_s < 1.31
    assert close(p.recompute_s, RECOMPUTE_S) and p.recompute_tokens == KV_TOKENS
    assert close(p.recompute_flops, 2 * 70.6e9 * KV_TOKENS)
    # then the observation's step, exactly as after a hold
    assert close(p.resume_latency_s, RECOMPUTE_S + hold.resume_latency_s)
    assert close(r.summary["recompute_flops"], 2 * 70.6e9 * KV_TOKENS)


@pytest.mark.parametrize("kind", ["offload_host", "break_even"])
def test_e24_offload_host_timeline(kind):
    _, hold = e24("hold")
    r, p = e24(kind)
    assert p.decision == "offload_host" and p.moved_to == "offload_host"
    assert close(p.copy_out_done_s, p.start_s + RELOAD_S)
    assert p.blocks_freed_s == p.copy_out_done_s  # freed when the copy-out completes
    assert close(p.tool_return_s, p.start_s + 45.0)
    assert p.reload_start_s == p.tool_return_s  # naive reload: at tool return
    assert close(p.copy_in_done_s, p.tool_return_s + RELOAD_S)
    assert close(p.resume_stall_s, RELOAD_S) and 0.0209 < p.resume_stall_s < 0.0211
    assert close(p.first_token_s - p.copy_in_done_s, hold.resume_latency_s)
    assert close(p.paused_hbm_gb_s, KV_BYTES * RELOAD_S / 1e9)  # ~0.23 GB*s
    s = r.summary
    assert s["bytes_offloaded"] == KV_BYTES and s["bytes_reloaded"] == KV_BYTES
    assert s["pause_decisions"] == {"offload_host": 1}
    assert p.bytes_offloaded_host == KV_BYTES and p.bytes_reloaded_nvme == 0.0


def test_e24_pipelined_timeline():
    """Pipelined reload: the copy-in starts at tool return as for the naive path; the turn
    is released when the rest of the copy equals the observation's predicted prefill, so
    its first token comes exactly when the copy-in ends."""
    _, hold = e24("hold")
    obs_s = hold.resume_latency_s  # the 512-token observation step after a hold: 20.3 ms
    _, p = e24("offload_host", **{"pause_policy.resume": "pipelined"})
    assert p.decision == "offload_host" and p.moved_to == "offload_host"
    assert close(p.copy_out_done_s, p.start_s + RELOAD_S) and p.blocks_freed_s == p.copy_out_done_s
    assert close(p.tool_return_s, p.start_s + 45.0)
    assert p.reload_start_s == p.tool_return_s
    assert close(p.copy_in_done_s, p.tool_return_s + RELOAD_S)
    assert close(p.resident_s, p.copy_in_done_s - obs_s)  # the turn is released
    assert close(p.first_token_s, p.copy_in_done_s)  # the prefill hid the rest of the copy
    assert close(p.resume_stall_s, RELOAD_S - obs_s) and 0.0006 < p.resume_stall_s < 0.0007
    assert close(p.resume_latency_s, RELOAD_S)
    assert p.bytes_reloaded_host == KV_BYTES


@pytest.mark.parametrize("obs_tokens", [512, 10000])  # short: one step; long: two chunks
def test_pipelined_stall_is_reload_less_overlap(obs_tokens):
    more = {"workload.observation_tokens": obs_tokens}
    _, hold = e24("hold", **more)
    overlap_s = hold.resume_latency_s  # the observation's prefill steps, alone in the batch
    _, p = e24("offload_host", **{"pause_policy.resume": "pipelined"}, **more)
    want = resume_timeline(
        PrefetchPlan("pipelined"),
        wait_s=45.0,
        reload_s=RELOAD_S,
        egress_s=RELOAD_S,
        overlappable_prefill_s=overlap_s,
    ).stall_s
    assert close(want, max(0.0, RELOAD_S - overlap_s))
    assert close(p.resume_stall_s, want, rel=1e-6)
    if obs_tokens == 512:
        assert p.resume_stall_s > 0
    else:  # the prefill outlasts the copy: released at the copy-in's start, no stall
        assert overlap_s > RELOAD_S and p.resume_stall_s == 0.0
        assert p.resident_s == p.reload_start_s
        assert close(p.first_token_s, p.tool_return_s + overlap_s)


@pytest.mark.parametrize("exact", [False, True])
def test_e24_pipelined_from_nvme_frees_its_frames(exact):
    _, hold = e24("hold")
    more = {"pause_policy.kind": "offload_nvme", "pause_policy.resume": "pipelined"}
    checks = {"engine.exact": exact, "engine.check_invariants": True}
    sim = build(str(WORKLOADS / E24), **more, **checks)
    r = sim.run()
    p = r.pauses.iloc[0]
    assert close(p.copy_in_done_s, p.tool_return_s + NVME_S)  # the run waits for the copy
    assert close(p.resume_stall_s, NVME_S - hold.resume_latency_s)
    assert close(p.first_token_s, p.copy_in_done_s)
    assert sim.pauses.nvme.used_frames == 0 and sim.pauses.streaming == 0


PIPELINED = {"pause_policy.kind": "offload_host", "pause_policy.resume": "pipelined"}


def _pipelined_exact_mode_agrees(size: dict, exact_invariants: bool) -> None:
    """Exact (step by step) and fast modes give the same pipelined swarm; the fast run's
    invariants are checked after every decision, the exact run's after every step when
    ``exact_invariants`` (about 50 times the cost of the run itself)."""
    fast = run("agent_swarm.yaml", **size, **PIPELINED)
    exact = run(
        "agent_swarm.yaml",
        **size,
        **PIPELINED,
        **{"engine.exact": True, "engine.check_invariants": exact_invariants},
    )
    assert fast.summary["bytes_reloaded"] > 0
    assert_same_summary(fast.summary, exact.summary)
    assert_same_frame(fast.pauses, exact.pauses)


def test_pipelined_swarm_exact_mode_keeps_its_invariants():
    # every step of the exact mode checked, on a swarm small enough for CI (2 x 2 turns:
    # two pauses, each reloaded); the full swarm below is the slow test
    small = {**SWARM, "workload.num_trajectories": 2, "workload.arrival.concurrency": 2}
    _pipelined_exact_mode_agrees({**small, "workload.turns": 2}, exact_invariants=True)


@pytest.mark.slow
def test_pipelined_swarm_exact_mode_keeps_its_invariants_full():
    _pipelined_exact_mode_agrees(SWARM, exact_invariants=True)


def test_pipelined_swarm_modes_agree_with_invariants():
    more = PIPELINED
    fast = run("agent_swarm.yaml", **SWARM, **more)
    # the exact run's own invariants: the tests above (every step costs a check)
    exact = run(
        "agent_swarm.yaml", **SWARM, **more, **{"engine.exact": True, "engine.check_invariants": False}
    )
    assert_same_summary(fast.summary, exact.summary)
    assert_same_frame(fast.pauses, exact.pauses)
    s, pauses = fast.summary, fast.pauses
    assert s["trajectories_completed"] == 3 and s["unfinished"] == 0
    assert s["bytes_reloaded"] > 0
    back = pauses[pauses.copy_in_done_s.notna() & pauses.resident_s.notna()]
    assert len(back) > 0
    assert (back.resident_s >= back.reload_start_s).all()
    assert (back.resident_s <= back.copy_in_done_s).all()
    naive = run("agent_swarm.yaml", **SWARM, **{"pause_policy.kind": "offload_host"}).summary
    assert s["resume_stall_s"]["mean"] < naive["resume_stall_s"]["mean"]


def test_e24_offload_nvme_timeline():
    _, p = e24("offload_nvme")
    assert close(p.copy_out_done_s - p.start_s, NVME_S)
    assert close(p.resume_stall_s, NVME_S)
    assert p.bytes_offloaded_nvme == KV_BYTES and p.bytes_reloaded_nvme == KV_BYTES


def test_e24_unknown_wait_break_even_holds():
    _, p = e24("break_even", **{"pause_policy.predictor.mode": "mean"})
    assert p.decision == "hold" and p.reason == "unknown wait: hold"
    assert math.isnan(p.predicted_wait_s)


@pytest.mark.parametrize("kind", ["hold", "recompute", "offload_host", "offload_nvme"])
def test_e24_exact_and_fast_modes_agree(kind):
    fast = run(E24, **{"pause_policy.kind": kind})
    exact = run(E24, **{"pause_policy.kind": kind, "engine.exact": True})
    assert_same_summary(fast.summary, exact.summary)
    assert_same_frame(fast.pauses, exact.pauses)


def test_tool_returning_before_the_copy_out_ends_keeps_its_blocks():
    sim = build(
        str(WORKLOADS / E24),
        **{
            "pause_policy.kind": "offload_host",
            "workload.pause_s": 0.01,
            "engine.check_invariants": True,
        },
    )
    r = sim.run()
    p = r.pauses.iloc[0]
    assert p.note == "tool returned before the copy-out ended"
    assert p.resume_stall_s == 0.0 and math.isnan(p.blocks_freed_s)
    assert close(p.copy_out_done_s, p.start_s + RELOAD_S)
    assert p.bytes_reloaded_host == 0.0
    assert sim.pauses.host.used_frames == 0  # the copy's frames came back


def test_host_pool_too_small_falls_back_to_when_full():
    r, p = e24("offload_host", **{"hardware.host_kv_pool_bytes": KV_BYTES / 2})
    assert p.decision == "hold" and p.reason == "host DRAM full: hold"
    r, p = e24(
        "offload_host",
        **{"hardware.host_kv_pool_bytes": KV_BYTES / 2, "pause_policy.when_full": "recompute"},
    )
    assert p.decision == "recompute"


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_e24_recompute_evicting_from_the_prefix_cache_really_recomputes(kind):
    """On a prefix cache a plain recompute hits its own dropped blocks (nothing to
    prefill again); with ``evict_from_prefix_cache`` they are gone and the whole context
    is prefilled again, as on the paged allocator."""
    cached, p0 = e24("recompute", **{"allocator.kind": kind})
    r, p = e24(
        "recompute", **{"allocator.kind": kind, "pause_policy.evict_from_prefix_cache": True}
    )
    assert p0.recompute_tokens == 0 and p0.recompute_flops == 0.0 and p0.resume_stall_s == 0.0
    assert cached.summary["prefix_hit_rate"] > 0.49
    assert p.decision == "recompute" and p.recompute_tokens == KV_TOKENS
    assert close(p.recompute_flops, 2 * 70.6e9 * KV_TOKENS)
    assert close(p.resume_stall_s, RECOMPUTE_S)
    s = r.summary
    assert s["prefix_hit_rate"] == 0.0 and s["prefix_evicted_blocks"] == KV_TOKENS // 16
    assert close(s["recompute_flops"], 2 * 70.6e9 * KV_TOKENS)


def test_evict_from_prefix_cache_changes_nothing_without_a_prefix_cache():
    r0, p0 = e24("recompute")
    r1, p1 = e24("recompute", **{"pause_policy.evict_from_prefix_cache": True})
    assert_same_summary(r0.summary, r1.summary)
    assert p1.recompute_tokens == p0.recompute_tokens == KV_TOKENS
    assert p1.resume_stall_s == p0.resume_stall_s


@pytest.mark.parametrize("kind", ["radix", "paged_hash"])
def test_swarm_recompute_evicting_from_the_prefix_cache(kind):
    """Shared system prompts and forks: the option lowers the hits and raises the
    recompute, every trajectory completes, invariants checked after every decision."""
    runs = {
        ev: run(
            "agent_swarm.yaml",
            **SWARM,
            **{
                "allocator.kind": kind,
                "pause_policy.kind": "recompute",
                "pause_policy.evict_from_prefix_cache": ev,
            },
        ).summary
        for ev in (False, True)
    }
    plain, evict = runs[False], runs[True]
    assert evict["trajectories_completed"] == plain["trajectories_completed"] == 3
    assert evict["prefix_hit_rate"] < plain["prefix_hit_rate"]
    assert evict["recompute_flops"] > 100 * plain["recompute_flops"] > 0
    assert plain["prefix_evicted_blocks"] == 0 < evict["prefix_evicted_blocks"]
    assert evict["prefix_hit_rate"] > 0  # the shared system prompt still hits


SWARM = {
    "workload.num_trajectories": 3,
    "workload.arrival.concurrency": 3,
    "workload.turns": 5,
    "hardware.node": "dgx-h100",
}


@pytest.mark.parametrize(
    "kind",
    ["hold", "recompute", "offload_host", "offload_nvme", "break_even", "min_waste", "ttl_pin"],
)
def test_every_policy_runs_the_swarm_with_invariants(kind):
    r = run("agent_swarm.yaml", **SWARM, **{"pause_policy.kind": kind})
    s, pauses = r.summary, r.pauses
    assert s["trajectories_completed"] == 3 and s["unfinished"] == 0
    assert s["pause_count"] == len(pauses) > 0
    assert sum(s["pause_outcomes"].values()) == len(pauses)
    done = pauses[pauses.tool_return_s.notna()]
    assert (done.resume_stall_s >= 0).all() and (done.resume_latency_s > 0).all()
    assert (done.resume_latency_s >= done.resume_stall_s).all()
    moved = pauses[pauses.moved_to.isin(["offload_host", "offload_nvme"])]
    assert ((moved.blocks_freed_s >= moved.copy_out_done_s) | moved.blocks_freed_s.isna()).all()
    assert (moved.copy_in_done_s.dropna() >= moved.reload_start_s.dropna()).all()
    if kind in ("offload_host", "offload_nvme"):
        assert s["bytes_offloaded"] > 0 and s["bytes_reloaded"] > 0
    if kind == "hold":  # forked branches hold outside the policy's pauses (F29 counts them)
        assert s["paused_hbm_gb_s"] <= s["hold_gb_s"]
        nofork = run("agent_swarm.yaml", **SWARM, **{"workload.fork": None}).summary
        assert math.isclose(nofork["paused_hbm_gb_s"], nofork["hold_gb_s"], rel_tol=1e-9)
        assert nofork["fork_hold_gb_s"] == 0.0
    assert 0.0 <= s["fork_hold_gb_s"] <= s["hold_gb_s"]
    if kind == "recompute":  # nothing is held, the branches' parents included
        assert s["hold_gb_s"] == s["fork_hold_gb_s"] == 0.0


def test_reload_waits_for_hbm_then_copies_in():
    """A pool that holds one context: the reload waits until the other trajectory's KV
    is gone, and its copy-in starts only then."""
    sim = build(
        str(WORKLOADS / E24),
        **{
            "pause_policy.kind": "offload_host",
            "hardware.kv_pool_bytes_per_gpu": KV_BYTES / 8 * 1.2,
            "workload.num_trajectories": 2,
            "workload.arrival.interval_s": 30.0,
            "engine.check_invariants": True,
        },
    )
    r = sim.run()
    p = r.pauses.sort_values("pause_id")
    assert list(p.moved_to) == ["offload_host", "offload_host"]
    assert (p.resume_stall_s >= RELOAD_S * (1 - 1e-9)).all()
    assert (p.copy_in_done_s - p.reload_start_s).map(lambda d: close(d, RELOAD_S)).all()
    assert r.summary["trajectories_completed"] == 2


def test_offloaded_blocks_are_never_read_by_a_step():
    sim = build(str(WORKLOADS / E24), **{"pause_policy.kind": "offload_host"})
    ctl: PauseLifecycle = sim.pauses

    class Req:
        seq_id = "s"

    class Sched:
        running = [Req()]

    ctl.sched = Sched()
    ctl.transfers.table.set("s", [BlockFrame(Tier.HBM, 0), BlockFrame(Tier.HOST, 3)])
    with pytest.raises(InvariantError, match="HOST"):
        ctl.check_invariants()
    ctl.transfers.table.set("s", [BlockFrame(Tier.HBM, 0)])
    ctl.check_invariants()


@pytest.mark.parametrize(
    ("key", "value", "field"),
    [
        ("pause_policy.preempt_swap", True, "pause_policy.preempt_swap"),
    ],
)
def test_options_the_engine_does_not_run_are_refused(key, value, field):
    with pytest.raises(ConfigError) as exc:
        build(str(WORKLOADS / E24), **{key: value})
    assert exc.value.field == field and "--set" in str(exc.value)


def test_unknown_policy_names_the_valid_ones():
    with pytest.raises(ConfigError) as exc:
        run_scenario(str(WORKLOADS / E24), **{"pause_policy.kind": "swap"})
    for name in ("break_even", "min_waste", "offload_host", "ttl_pin"):
        assert name in str(exc.value)


class _ReturnsPolicy(Hold):
    """A plug-in pause policy whose ``decide`` returns ``returned``."""

    name = "returns_test"
    returned: object = None

    class Options(Hold.Options):
        kind: Literal["returns_test"] = "returns_test"  # type: ignore[assignment]

    def decide(self, facts):
        return self.returned


RETURNS = f"{_ReturnsPolicy.__module__}.{_ReturnsPolicy.__qualname__}"


def _refusal(monkeypatch, returned: object) -> str:
    """The one-line error of E24 run with a plug-in policy whose ``decide`` returns
    ``returned`` (registered after the shipped policies, so the table is patched)."""
    policy_names()
    monkeypatch.setitem(policy_registry._REGISTRY, "returns_test", _ReturnsPolicy)
    monkeypatch.setattr(_ReturnsPolicy, "returned", returned)
    with pytest.raises(KvsimError) as exc:
        e24("returns_test")
    return str(exc.value)


@pytest.mark.parametrize(
    "returned, shown",
    [("hold", "str 'hold'"), (None, "NoneType None"), (("hold", "x"), "tuple ('hold', 'x')")],
)
def test_a_plugin_policy_returning_no_decision_is_refused_naming_it(monkeypatch, returned, shown):
    """It failed as ``AttributeError: 'str' object has no attribute 'action'`` in the
    pause lifecycle; now one line where the decision enters the engine."""
    assert _refusal(monkeypatch, returned) == (
        f"pause policy 'returns_test' ({RETURNS}) returned {shown} from decide; it must return "
        "a sim.policy.Decision (action one of: hold, recompute, offload_host, offload_nvme)"
    )
    monkeypatch.setattr(_ReturnsPolicy, "returned", Decision("recompute", "plug-in"))
    _, p = e24("returns_test")  # a Decision goes through
    assert (p.decision, p.reason) == ("recompute", "plug-in")


def test_link_and_tiers_come_from_profiles_unless_overridden():
    sim = build(str(WORKLOADS / E24), **{"hardware.host_link_bw_bytes_per_s": None})
    t = sim.resolved.tiers
    assert t.link_bw_bytes_per_s == 54.0e9  # the H100 profile's effective PCIe Gen5 DMA
    assert t.host_pool_bytes == 2e12 * 0.5 and t.nvme_pool_bytes == 8 * 3.84e12
    assert t.nvme_bw_bytes_per_s == 8 * 7.0e9 and t.link_overhead_s == 0.0
    bare = build(str(WORKLOADS / E24), **{"hardware.node": None}).resolved.tiers
    assert bare.host_pool_bytes == 0 and bare.nvme_pool_bytes == 0


def _pressure(kind: str, n: int) -> dict:
    r = run_scenario(
        str(WORKLOADS / "agent_swarm_pressure.yaml"),
        **{"pause_policy.kind": kind, "workload.num_trajectories": n},
    )
    m, s = r.memory, r.summary
    dt = m.t_s.diff().shift(-1).fillna(0.0)
    s["running_mean"] = float((m.n_running * dt).sum() / s["sim_time_s"])
    return s


def _check_pressure(n: int) -> None:
    s = {k: _pressure(k, n) for k in ("hold", "recompute", "offload_host", "break_even")}
    for k, v in s.items():
        assert v["trajectories_completed"] == n, k
    # holding paused KV on a small pool: fewer requests admitted, worse tail TTFT
    for k in ("recompute", "offload_host", "break_even"):
        assert s[k]["running_mean"] > 1.5 * s["hold"]["running_mean"], k
        assert s[k]["ttft_s"]["p99"] < s["hold"]["ttft_s"]["p99"], k
        assert s[k]["paused_hbm_gb_s"] < 0.1 * s["hold"]["paused_hbm_gb_s"], k
    # parking in host DRAM stalls a resume less than rebuilding the context
    assert s["offload_host"]["resume_stall_s"]["mean"] < s["recompute"]["resume_stall_s"]["mean"]
    assert s["recompute"]["bytes_offloaded"] == 0 < s["offload_host"]["bytes_offloaded"]


def test_agent_swarm_pressure_reduced():
    _check_pressure(16)


@pytest.mark.slow
def test_agent_swarm_pressure_full():
    _check_pressure(48)


@pytest.mark.parametrize("kind", ["offload_host", "offload_nvme", "break_even", "ttl_pin"])
def test_swarm_under_pressure_exact_and_fast_modes_agree(kind):
    over = {
        "pause_policy.kind": kind,
        "workload.num_trajectories": 6,
        "workload.turns": 6,
        "engine.check_invariants": False,  # checked in the tests above; exact mode is slow
    }
    fast = run("agent_swarm_pressure.yaml", **over)
    exact = run("agent_swarm_pressure.yaml", **over, **{"engine.exact": True})
    assert fast.summary["pause_count"] > 0
    assert_same_summary(fast.summary, exact.summary)
    assert_same_frame(fast.pauses, exact.pauses)
    assert_same_frame(fast.requests, exact.requests)


def test_e24_speculative_prefetch_timeline():
    """Two 45 s pauses: the second knows the tool's minimum (45 s) and starts the reload at
    T_min - T_reload - margin (E25's rule), so the context is resident when the tool
    returns; the HBM taken early is accounted."""
    over = {"pause_policy.kind": "offload_host", "workload.turns": 3}
    naive = run(E24, **over).pauses
    r = run(E24, **over, **{"pause_policy.resume": "speculative"})
    first, second = r.pauses.iloc[0], r.pauses.iloc[1]
    assert_same_frame(naive.iloc[:1], r.pauses.iloc[:1])  # no samples yet: naive
    reload_s = second.tokens * KV_BYTES / KV_TOKENS / 8 / 64e9
    assert close(second.reload_start_s, second.start_s + 45.0 - reload_s - 0.2)
    assert close(second.copy_in_done_s, second.reload_start_s + reload_s)
    assert second.resume_stall_s == 0.0 and second.resident_s == second.tool_return_s
    held_s = (second.copy_out_done_s - second.start_s) + (
        second.tool_return_s - second.reload_start_s
    )
    assert close(second.paused_hbm_gb_s, second.state_bytes * held_s / 1e9)
    assert first.resume_stall_s > 0 and naive.iloc[1].resume_stall_s > 0
    exact = run(E24, **over, **{"pause_policy.resume": "speculative", "engine.exact": True})
    assert_same_frame(r.pauses, exact.pauses)


@pytest.mark.parametrize("kind", ["offload_host", "break_even"])
def test_speculative_prefetch_in_the_swarm(kind):
    over = {"pause_policy.kind": kind, "pause_policy.resume": "speculative"}
    r = run("agent_swarm.yaml", **SWARM, **over)
    p = r.pauses
    assert r.summary["trajectories_completed"] == 3
    early = p[p.reload_start_s < p.tool_return_s]
    assert len(early) > 0  # some reloads started before their tool returned
    assert (early.resume_stall_s >= 0).all()
    fast = run("agent_swarm_pressure.yaml", **SWARM, **over, **{"engine.check_invariants": False})
    exact = run(
        "agent_swarm_pressure.yaml",
        **SWARM,
        **over,
        **{"engine.check_invariants": False, "engine.exact": True},
    )
    assert_same_summary(fast.summary, exact.summary)
    assert_same_frame(fast.pauses, exact.pauses)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 1000),
    kind=st.sampled_from(["offload_host", "offload_nvme", "break_even", "min_waste", "ttl_pin"]),
    resume=st.sampled_from(["naive", "speculative"]),
    sharing=st.sampled_from(["fifo", "fair"]),
    pool_gb=st.sampled_from([4.0, 8.0, 20.0]),
    host_gb=st.sampled_from([0.5, 2.0, 100.0]),
    fork_mode=st.sampled_from(["join", "prune"]),
)
def test_random_swarms_keep_every_invariant(
    seed, kind, resume, sharing, pool_gb, host_gb, fork_mode
):
    """Invariants after every decision (steps read only HBM blocks; host and NVMe frames
    within capacity), on small pools and small host tiers; every trajectory completes."""
    sim = build(
        str(WORKLOADS / "agent_swarm_pressure.yaml"),
        **{
            "seed": seed,
            "pause_policy.kind": kind,
            "pause_policy.resume": resume,
            "hardware.link_sharing": sharing,
            "hardware.kv_pool_bytes_per_gpu": pool_gb * 1e9,
            "hardware.host_kv_pool_bytes": host_gb * 1e9,
            "workload.num_trajectories": 4,
            "workload.arrival.concurrency": 4,
            "workload.turns": 4,
            "workload.fork.mode": fork_mode,
            "workload.fork.probability": 0.3,
            "engine.check_invariants": True,
        },
    )
    r = sim.run()
    assert r.summary["trajectories_completed"] == 4
    for pool in (sim.pauses.host, sim.pauses.nvme):
        pool.check_invariants()
        assert pool.peak_used_frames <= pool.num_frames
        assert pool.used_frames == 0  # every frame came back
    assert sim.pauses.copies_in == 0


@pytest.mark.parametrize(
    "returned, field, shown",
    [(Decision("hold", 3), "reason", "int 3"),  # type: ignore[arg-type]
     (Decision("recompute", "ok", hint_refused=None), "hint_refused", "NoneType None")],  # type: ignore[arg-type]
)  # fmt: skip
def test_a_plugin_decision_whose_text_is_not_a_str_is_refused_naming_it(monkeypatch, returned, field, shown):
    """A non-str reason failed only when the run wrote its pause table (the text columns);
    now one line where the decision enters the engine, naming the policy and the field."""
    assert _refusal(monkeypatch, returned) == (
        f"pause policy 'returns_test' ({RETURNS}) returned a Decision whose {field} is {shown}; "
        "it must be a str (one short phrase, recorded with the pause)"
    )
