"""How a pause ends when its next turn never runs (h122): a turn cancelled in the queue or
during its recompute ends its pause ``cancelled``; a turn a cluster's router (or a
disaggregated prefill instance) refuses ends it ``refused``, as a node's own refusal does;
a pause that ended without its next turn running is priced by the oracle as never
resumed; and no pause is left open when the workload ends (``check_closed``).

The timelines are E24 (seed_tool_wait_45s.yaml: Llama-3.1-70B on 8 x H100, a 32,768-token
task, one reply token, 45 s tools, 512-token observations; paged, no prefix cache; linear
prefill FLOPs at 45 % MFU: a 32,768-token prefill takes R, an 8,192-token chunk R / 4).
The fork set-up: after the first turn (ending at R) the trajectory forks two branches of
two turns each, in ``prune`` mode (the first branch to finish wins, the other is
cancelled), with one running request at a time (``max_num_seqs: 1``): branch 1's turns
run first, so branch 1 finishes its line exactly when branch 2's last turn arrives (its
first turn ran one observation step later), and that turn is cancelled in the queue."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from engine_helpers import WORKLOADS, run

from sim.engine.pauses import PauseLifecycle, PauseState
from sim.errors import InvariantError
from sim.metrics.pauses import PAUSE_OUTCOMES
from sim.run.runner import build

E24 = "seed_tool_wait_45s.yaml"
PEAK = 989.4e12  # H100 SXM bf16
R = 2 * 70.6e9 * 32768 / (8 * 0.45 * PEAK)  # the 32,768-token prefill: ~1.299 s
BYTES_PER_TOKEN_GPU = 2 * 80 * 8 * 128 * 2 // 8  # 40,960 B per token on each of 8 GPUs
POOL_2080 = 2080 * 16 * BYTES_PER_TOKEN_GPU  # 33,280 tokens: the second turn never fits
PRUNE = {
    "workload.fork": {"probability": 1.0, "branches": 2, "branch_turns": 2, "mode": "prune"},
    "scheduler.max_num_seqs": 1,
}


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def endings(**counts: int) -> dict[str, int]:
    return {o: counts.get(o, 0) for o in PAUSE_OUTCOMES}


def prune(**more):
    """The fork set-up; returns (the run, the pause records, the requests by id)."""
    sim = build(str(WORKLOADS / E24), **{**PRUNE, "engine.check_invariants": True, **more})
    r = sim.run()
    assert sim.pauses._waiting == {} and sim.pauses._recomputing == {}
    assert all(not p.open for p in sim.pauses.pauses)
    return r, sim.pauses.pauses, r.requests.set_index("req_id")


def test_a_resumed_turn_cancelled_in_the_queue_ends_its_pause_cancelled():
    """``hold``: branch 2's second turn (request 4) arrives when branch 1's last turn
    (request 3) ends; branch 1 wins, and request 4, resumed on its held KV and queued, is
    cancelled at that boundary, never admitted. Its pause (2) ends ``cancelled`` there
    (it read ``resumed``, a turn that never ran), priced never resumed: the oracle drops
    the context at once (recompute, 0 s), the policy paid its 45 s hold, as pause 1 (the
    same tokens held as long, resumed) did."""
    r, records, q = prune()
    assert q.loc[4].status == "cancelled" and math.isnan(q.loc[4].admitted_s)
    assert q.loc[4].arrival_s == q.loc[4].finish_s == q.loc[3].finish_s
    p = r.pauses
    assert p.outcome.tolist() == ["released", "resumed", "cancelled", "resumed"]
    c = p.iloc[2]
    assert c.note == "its turn was never admitted" and c.moved_to == "hold"
    assert c.tool_return_s == c.ended_s == q.loc[4].finish_s
    assert close(c.actual_wait_s, 45.0) and c.resume_stall_s == 0.0
    assert c.oracle_action == "recompute" and c.oracle_cost_s == 0.0
    assert c.policy_cost_s == p.iloc[1].policy_cost_s > 0  # the same 45 s hold
    assert records[2].state == PauseState.DONE  # (kept; the outcome was set before)
    assert r.summary["pause_endings"] == endings(released=1, resumed=2, cancelled=1)


@pytest.mark.parametrize("max_num_seqs", [1, 2])
def test_a_turn_cancelled_before_its_recompute_ends_its_pause_cancelled(max_num_seqs):
    """``recompute``: branch 2's second turn is cancelled while its pause waits for the
    recompute: queued (one running request at a time), or, with two, admitted beside
    branch 1's last chunk and one 8,192-token chunk into its own 33,281-token recompute
    when branch 1 ends. The pause ends ``cancelled`` at the cancellation (GONE; it stayed
    ``open``, its state RECOMPUTE, before h122) and its recompute is what its turn did: 0
    tokens, or the one chunk (priced R / 4 as its step was; it counted the whole context,
    priced at the admission)."""
    r, records, q = prune(**{"pause_policy.kind": "recompute",
                             "scheduler.max_num_seqs": max_num_seqs})  # fmt: skip
    p = r.pauses
    assert p.outcome.tolist() == ["released", "recomputed", "cancelled", "recomputed"]
    c = p.iloc[2]
    assert q.loc[4].status == "cancelled" and c.ended_s == q.loc[4].finish_s
    assert c.tool_return_s == q.loc[4].arrival_s < c.ended_s
    assert records[2].state == PauseState.GONE and math.isnan(c.resident_s)
    if max_num_seqs == 1:
        assert math.isnan(q.loc[4].admitted_s) and c.note == "its turn was never admitted"
        assert c.recompute_tokens == 0 and c.recompute_s == 0.0 and c.recompute_flops == 0
    else:
        assert q.loc[4].admitted_s == q.loc[3].finish_s < c.ended_s and c.note == ""
        assert c.recompute_tokens == 8192 and close(c.recompute_s, R / 4)
        assert close(c.recompute_flops, 2 * 70.6e9 * 8192)
        assert close(c.ended_s - q.loc[4].admitted_s, R / 4)  # one chunk's step
    assert c.oracle_action == "recompute" and c.oracle_cost_s == 0.0
    assert close(c.policy_cost_s, c.recompute_s)  # (recompute frees the blocks at once)
    assert r.summary["pause_endings"] == endings(released=1, recomputed=2, cancelled=1)


def test_a_reload_cancelled_before_its_turn_ran_ends_cancelled_as_before():
    """``offload_host``: the same cancellation finds branch 2's pause waiting for its
    copy-in (the gate holds the turn): it ended ``cancelled`` already, unchanged."""
    r, _, _ = prune(**{"pause_policy.kind": "offload_host"})
    assert r.pauses.outcome.tolist() == ["released", "reloaded", "cancelled", "reloaded"]


def _ttft_cluster(**more):
    """E24, two trajectories (B from 46.29 s) on a one-node cluster behind ``ttft_estimate``
    with an SLO of 32,768.5 prefill tokens: each first turn (32,768 tokens, nothing queued)
    passes; A's second turn, at R + 45 s (46.299 s), sees B's 32,768 tokens still to
    prefill plus its own 513: refused by the router. Returns the run and its node."""
    over = {"workload.num_trajectories": 2, "workload.arrival.kind": "closed_loop",
            "workload.arrival.concurrency": 2, "workload.arrival.stagger_s": 46.29,
            "cluster": {"nodes": [{"count": 1}], "router": {"kind": "ttft_estimate"}},
            "engine.check_invariants": True, **more}  # fmt: skip
    rate = build(str(WORKLOADS / E24), **over).front.predicted_ttft_s(
        0, SimpleNamespace(prompt_tokens=1), 0
    )
    assert close(rate * 32768, R)
    over["cluster"]["router"]["ttft_slo_s"] = 32768.5 * rate
    sim = build(str(WORKLOADS / E24), **over)
    return sim.run(), sim.parts[0]


@pytest.mark.parametrize("kind", ["hold", "offload_host"])
def test_a_turn_the_router_refuses_ends_its_pause_refused(kind):
    """The router's refusal reaches the sequence's home node (``Node.refused``): A's pause
    ends ``refused`` at the refusal, its tool's return (it read ``released``, when the
    failed trajectory let its sequence go, a step boundary later), as a node's own
    refusal ends it, and its KV is freed. Under ``offload_host`` B's second turn is
    refused too (its context is on the host: the router counts all 33,281 tokens), and
    both pauses' host frames come back."""
    r, part = _ttft_cluster(**{"pause_policy.kind": kind})
    q = r.requests.set_index("req_id")
    assert q.loc[2].finish_reason == "rejected_by_router" and q.loc[2].traj_id == 0
    a = r.pauses.iloc[0]
    assert a.traj_id == 0 and a.outcome == "refused" and a.note == "its turn was never admitted"
    assert a.tool_return_s == a.ended_s == q.loc[2].arrival_s and close(a.ended_s, R + 45.0)
    assert a.oracle_action == "recompute" and a.oracle_cost_s == 0.0
    if kind == "hold":
        assert r.summary["pause_endings"] == endings(refused=1, resumed=1)
        assert r.summary["rejected_by_router"] == 1
    else:
        b = r.pauses.iloc[1]
        assert b.outcome == "refused" and b.ended_s == q.loc[3].arrival_s
        assert r.summary["pause_endings"] == endings(refused=2)
        assert r.summary["rejected_by_router"] == 2
        assert part.pauses.host.used_frames == 0 and part.pauses.host.peak_used_frames > 0
    assert part.kv.n_paused == 0 and part.kv.resident_tokens(0) == part.kv.resident_tokens(1) == 0


def test_a_turn_refused_on_a_prefill_instance_ends_its_decode_pause_refused():
    """Disaggregated: the decode instance holds A's context over its tool; the second
    turn (33,281 tokens and a reply token: 2,081 blocks) never fits the prefill instance's
    2,080 blocks and is refused there. The decode home hears of it: the pause ends
    ``refused`` and its KV is freed (it stayed ``open``, the KV held to the end: the
    front forgot the home at the rejection, so the trajectory's release never came)."""
    over = {"cluster": {"nodes": [
        {"count": 1, "role": "prefill", "hardware": {"kv_pool_bytes_per_gpu": POOL_2080}},
        {"count": 1, "role": "decode"}]}}  # fmt: skip
    r = run(E24, **over)
    assert r.requests.finish_reason.tolist() == ["stop", "rejected_never_fits"]
    (a,) = r.pauses.itertuples()
    assert a.outcome == "refused" and a.node == 1 and a.tool_return_s == a.ended_s
    assert close(a.ended_s - a.start_s, 45.0)
    assert r.summary["pause_endings"] == endings(refused=1)


def test_a_dropped_hold_whose_turn_is_refused_reads_refused_not_recomputed():
    """The decided accounting of a drop followed by a refusal (two trajectories, B from
    10 s, on 2,080 blocks): B's prefill drops A's hold at 10 s, then A's second turn never
    fits and is refused at its return. A's pause reads ``refused`` (its next turn never
    ran: nothing was prefilled again, ``recompute_tokens`` 0), keeps the drop's note and
    time, and is not in ``pauses_recomputed_after_drop`` (nor in the held-drop warning,
    which counts pauses that prefilled their context again); ``held_kv_drops`` counts
    the drop. The oracle prices it never resumed (0 s; it priced an offload, 0.0413 s)."""
    r = run(E24, **{"workload.num_trajectories": 2, "workload.arrival.kind": "closed_loop",
                    "workload.arrival.concurrency": 2, "workload.arrival.stagger_s": 10.0,
                    "hardware.kv_pool_bytes_per_gpu": POOL_2080})  # fmt: skip
    a, b = r.pauses.iloc[0], r.pauses.iloc[1]
    assert a.outcome == b.outcome == "refused" and a.moved_to == "recompute"
    assert a.note == "dropped under memory pressure; its turn was never admitted"
    assert a.blocks_freed_s == 10.0 and a.recompute_tokens == 0 and a.recompute_s == 0.0
    assert a.ended_s == a.tool_return_s and close(a.tool_return_s, R + 45.0)
    assert a.oracle_action == "recompute" and a.oracle_cost_s == 0.0 < a.policy_cost_s
    s = r.summary
    assert s["held_kv_drops"] == 1 and s["pauses_recomputed_after_drop"] == 0
    assert not any(w.startswith("memory pressure:") for w in s["warnings"])
    assert s["pause_endings"] == endings(refused=2)


def test_a_refused_recompute_costs_the_oracle_nothing():
    """E24 under ``recompute`` on 2,080 blocks: the second turn is refused at the tool's
    return. Policy and oracle both cost 0 s: the context was dropped and never needed
    again (the oracle priced a resume that never ran, an offload at 0.0413 s, above the
    policy's 0 s, before h122)."""
    r = run(E24, **{"pause_policy.kind": "recompute", "hardware.kv_pool_bytes_per_gpu": POOL_2080})
    (p,) = r.pauses.itertuples()
    assert p.outcome == "refused" and p.policy_cost_s == 0.0
    assert p.oracle_action == "recompute" and p.oracle_cost_s == 0.0
    assert r.summary["pause_cost_gap_ratio"] is None  # (an oracle of 0 s: no ratio)


def test_a_pause_left_open_at_the_end_of_the_workload_is_an_invariant_failure(monkeypatch):
    """With the turn-end bookkeeping undone (``turn_gone`` a no-op, the state before h122's
    recompute case), the cancelled turn's pause stays open and the run stops at its end
    naming it."""
    monkeypatch.setattr(PauseLifecycle, "turn_gone", lambda self, req: None)
    with pytest.raises(InvariantError, match=r"^1 pause\(s\) still open when the workload "
                       r"ended: pause 2 \(trajectory 0, recompute\)$"):  # fmt: skip
        prune(**{"pause_policy.kind": "recompute"})
