"""Pause accounting on exact two-trajectory timelines (h99's findings 1 and 2): a hold
dropped under memory pressure ends ``recomputed`` and is priced as one; ``tool_return_s``
is when the tool returned (the next turn's arrival), not when a busy node took the turn in.

Both runs are E24 (seed_tool_wait_45s.yaml: Llama-3.1-70B on 8 x H100, a 32,768-token
task, one reply token, a 45 s tool call, a 512-token observation; paged, no prefix cache;
linear prefill FLOPs at 45 % MFU, so a 32,768-token prefill is four 8,192-token chunks of
R / 4 each) with two trajectories, the second started ``stagger_s`` after the first."""

from __future__ import annotations

import math

import pytest
from engine_helpers import WORKLOADS, run

from sim.metrics.summary import held_drop_warning, pause_warnings, run_warnings

E24 = "seed_tool_wait_45s.yaml"
PEAK = 989.4e12  # H100 SXM bf16
KV_TOKENS = 32768
KV_BYTES = KV_TOKENS * 2 * 80 * 8 * 128 * 2  # F1, 10.74 GB over the replica
BYTES_PER_TOKEN_GPU = 2 * 80 * 8 * 128 * 2 // 8  # 40,960 B per token on each of 8 GPUs
R = 2 * 70.6e9 * KV_TOKENS / (8 * 0.45 * PEAK)  # the 32,768-token prefill: ~1.299 s
FLOPS = 2 * 70.6e9 * KV_TOKENS  # F23, linear term only (the scenario's cost section)


def close(a, b, rel=1e-9):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def two(stagger_s: float, **more):
    return run(
        E24,
        **{
            "workload.num_trajectories": 2,
            "workload.arrival.kind": "closed_loop",
            "workload.arrival.concurrency": 2,
            "workload.arrival.stagger_s": stagger_s,
        },
        **more,
    )


def test_a_hold_dropped_under_pressure_ends_recomputed_and_is_priced():
    """A pool of 2,500 blocks (40,000 tokens) fits one held 32,768-token context (2,048
    blocks), not two: B's prefill at t = 10 s drops A's hold; at A's return (R + 45 s)
    A's recompute drops B's hold in turn. Each pause: outcome recomputed, all 32,768
    tokens prefilled again (no prefix cache) at the step pricer's price R, its context
    resident R after its tool returned, its HBM held from its start to its drop."""
    pool = 2500 * 16 * BYTES_PER_TOKEN_GPU
    r = two(10.0, **{"hardware.kv_pool_bytes_per_gpu": pool})
    a, b = r.pauses.iloc[0], r.pauses.iloc[1]
    for p, start, dropped in ((a, R, 10.0), (b, 10.0 + R, R + 45.0)):
        assert p.decision == "hold" and p.moved_to == "recompute"
        assert p.outcome == "recomputed" and p.note == "dropped under memory pressure"
        assert close(p.start_s, start) and close(p.tool_return_s, start + 45.0)
        assert close(p.blocks_freed_s, dropped)  # its blocks left the pool at the drop
        assert p.recompute_tokens == KV_TOKENS
        assert close(p.recompute_s, R) and close(p.recompute_flops, FLOPS)
        assert close(p.resident_s, p.tool_return_s + R) and close(p.resume_stall_s, R)
        held = KV_BYTES * (dropped - start)
        assert close(p.paused_hbm_gb_s, held / 1e9)
        # the policy's cost: pool-seconds held + the recompute it did not choose
        assert close(p.policy_cost_s, held / (pool * 8) + R)
    s = r.summary
    assert s["held_kv_drops"] == 2
    assert s["pause_endings"]["recomputed"] == 2 and s["pause_endings"]["resumed"] == 0
    assert s["pause_outcomes"] == {"recompute": 2} and s["pause_decisions"] == {"hold": 2}
    assert close(s["recompute_flops"], 2 * FLOPS)
    assert s["pause_count"] == 2 and s["pauses_recomputed_after_drop"] == 2
    want = held_drop_warning(s)
    assert want.startswith("memory pressure: 2 of 2 pauses (100.0%) lost their held KV")
    assert want in s["warnings"]


def test_held_drops_warn_over_five_percent_of_the_pauses():
    """The share is of the pauses that ended recomputed because of a drop: 1 of 20 (5 %)
    is silent, 2 of 20 (10 %) warns; drops whose pauses ended otherwise do not count."""
    quiet = {"held_kv_drops": 7, "pause_count": 20, "pauses_recomputed_after_drop": 1}
    assert held_drop_warning(quiet) == ""
    loud = {**quiet, "pauses_recomputed_after_drop": 2}
    assert held_drop_warning(loud) == (
        "memory pressure: 2 of 20 pauses (10.0%) lost their held KV and prefilled that "
        "context again (pauses.parquet: outcome recomputed, note 'dropped under memory "
        "pressure'; held_kv_drops 7 in all; rule: over 5% of the pauses)")
    assert held_drop_warning({"held_kv_drops": 0}) == ""  # a run without pauses
    s = {"warnings": ["x"], **loud}
    pause_warnings(s)
    assert s["warnings"] == ["x", held_drop_warning(loud)]


def test_the_tool_returns_at_the_next_turns_arrival_while_the_node_is_busy():
    """B arrives at 45.8 s and prefills until 45.8 + R; A's tool returns at R + 45 s
    (46.30 s), inside B's second chunk. The node takes A's turn in at a later step
    boundary (requests.queued_s) and runs it after B's prefill; A's context, held, was
    resident all along: tool_return_s = the turn's arrival, the stall 0, the wait exactly
    45 s, and the resume latency (45.8 + R) - (R + 45) = 0.8 s of waiting for B's
    prefill plus the observation's own step (B's pause, alone on the node, measures it)."""
    for exact in (False, True):
        r = two(45.8, **{"engine.exact": exact})
        a, b = r.pauses.iloc[0], r.pauses.iloc[1]
        nxt = r.requests.set_index("req_id").loc[2]  # A's second turn
        assert nxt.traj_id == 0 and nxt.turn == 1
        assert close(a.tool_return_s, R + 45.0) and a.tool_return_s == nxt.arrival_s
        assert nxt.queued_s > a.tool_return_s  # taken in at a step boundary after
        assert close(a.actual_wait_s, 45.0) and a.outcome == "resumed"
        assert a.resident_s == a.tool_return_s and a.resume_stall_s == 0.0
        observation_step = b.resume_latency_s  # B resumes on an idle node
        assert close(b.tool_return_s, 45.8 + R + 45.0)
        assert close(a.first_token_s, 45.8 + R + observation_step)
        assert close(a.resume_latency_s, 0.8 + observation_step)
        assert close(r.summary["resume_latency_s"]["mean"], 0.4 + observation_step)


def test_the_run_warnings_leave_the_pauses_to_pause_warnings():
    """``run_warnings`` runs before the pauses are summarised: it says nothing of them."""
    import pandas as pd

    summary = {
        "unfinished": 0, "requests_submitted": 10, "rejected": 0, "rejected_by_reason": {},
        "preemptions": 0, "held_kv_drops": 3, "pause_count": 3,
        "pauses_recomputed_after_drop": 3,
        "trajectories_by_status": {"failed": 0, "context_exhausted": 0},
        "trajectories_ended": 2,
    }  # fmt: skip
    requests = pd.DataFrame({"preemptions": [0, 0], "status": ["finished"] * 2,
                             "queue_s": [0.0, 0.0], "arrival_s": [0.0, 1.0], "req_id": [0, 1]})
    assert run_warnings(summary, requests) == []  # (too few requests for the overload rule)


def test_e24_single_trajectory_timeline_is_unchanged():
    """An idle node takes a turn in at its arrival: nothing moves there."""
    r = run(E24)
    p = r.pauses.iloc[0]
    assert close(p.tool_return_s, R + 45.0) and p.outcome == "resumed"
    assert r.summary["held_kv_drops"] == 0 and r.summary["warnings"] == []


def test_every_pause_of_a_pressured_hold_swarm_agrees_with_its_next_turn():
    """agent_swarm_pressure.yaml (20 trajectories, hold on a 10 GB pool: h99's run): each
    pause checked against its next turn in requests.parquet (same trajectory and first
    token, where that names one turn). A pause ``resumed`` found its whole context held
    at admission; a ``recomputed`` one found none held and prefilled the context less its
    prefix-cache hit, priced; every one's ``tool_return_s`` is that turn's arrival. Holds
    are dropped both before their tool returned and while their resumed turn waited in
    the queue (``dropped under memory pressure while its turn waited``)."""
    r = run("agent_swarm_pressure.yaml", **{"workload.num_trajectories": 20})
    p, q = r.pauses, r.requests
    q = q[q.first_token_s.notna()]
    key = ["traj_id", "first_token_s"]
    q = q[~q.duplicated(key, keep=False)]  # fork branches sharing a step: left out
    m = p.merge(q[[*key, "arrival_s", "held_tokens", "hit_tokens"]], on=key, how="inner")
    assert len(m) > 200
    assert (m.tool_return_s == m.arrival_s).all()
    resumed, recomputed = m[m.outcome == "resumed"], m[m.outcome == "recomputed"]
    assert (resumed.held_tokens >= resumed.tokens).all() and len(resumed) > 100
    assert (recomputed.held_tokens == 0).all() and len(recomputed) > 50
    assert (recomputed.moved_to == "recompute").all()
    want = recomputed.tokens - recomputed[["hit_tokens", "tokens"]].min(axis=1)
    assert (recomputed.recompute_tokens == want).all()
    assert (recomputed.recompute_s > 0).all() and (recomputed.recompute_flops > 0).all()
    assert (recomputed.policy_cost_s >= recomputed.recompute_s).all()
    notes = set(recomputed.note)
    assert notes == {
        "dropped under memory pressure",
        "dropped under memory pressure while its turn waited",
    }
    s = r.summary
    assert s["pause_endings"]["recomputed"] == (p.outcome == "recomputed").sum() > 0
    assert s["held_kv_drops"] > 0 and any(w.startswith("memory pressure:") for w in s["warnings"])


def test_a_reload_on_a_busy_node_stalls_from_the_return_but_costs_only_the_copy():
    """As above with offload_host: A's reload starts at the step boundary where the node
    takes its turn in (after its return, while B prefills) and runs RELOAD_S; A's stall
    counts from the tool's return, but its cost charges only the copy (a held context's
    turn waits for that boundary too), the same as B's reload on an idle node; and the
    reload, hidden behind B's prefill, leaves A's first token where a hold puts it."""
    reload_s = KV_BYTES / 8 / 64e9  # each GPU moves its share at 64 GB/s: 20.97 ms
    held = two(45.8).pauses.iloc[0]
    r = two(45.8, **{"pause_policy.kind": "offload_host"})
    a, b = r.pauses.iloc[0], r.pauses.iloc[1]
    assert a.outcome == b.outcome == "reloaded"
    assert close(a.tool_return_s, R + 45.0) and a.reload_start_s > a.tool_return_s
    assert close(a.copy_in_done_s - a.reload_start_s, reload_s)
    assert a.resident_s == a.copy_in_done_s
    assert close(a.resume_stall_s, a.copy_in_done_s - a.tool_return_s)
    assert b.reload_start_s == b.tool_return_s and close(b.resume_stall_s, reload_s)
    assert close(a.policy_cost_s, b.policy_cost_s)  # HBM until the copy-out + the reload
    assert close(a.first_token_s, held.first_token_s)


def test_a_hold_dropped_during_its_copy_out_counts_as_dropped():
    """offload_host on agent_swarm_pressure (24 trajectories): some contexts are dropped
    under pressure before their copy-out ends; their pauses end recomputed, their note
    says memory pressure dropped them, and ``pauses_recomputed_after_drop`` counts them
    with the others; a reload that found no HBM room also ends recomputed but lost no
    held KV (its context was on the host), so it is not counted."""
    r = run("agent_swarm_pressure.yaml",
            **{"workload.num_trajectories": 24, "pause_policy.kind": "offload_host"})  # fmt: skip
    p = r.pauses
    copy_out = p[p.note.str.contains("before copy-out end", na=False)]
    assert len(copy_out) >= 1 and (copy_out.outcome == "recomputed").all()
    assert copy_out.note.str.contains("dropped under memory pressure").all()
    recomputed = p[p.outcome == "recomputed"]
    dropped = recomputed.note.str.contains("dropped under memory pressure")
    no_room = recomputed.note == "no HBM room for the reload"
    assert (dropped | no_room).all() and no_room.any()
    assert r.summary["pauses_recomputed_after_drop"] == int(dropped.sum()) > len(copy_out)


def _logged_drops(monkeypatch) -> list[tuple]:
    """Every drop memory pressure makes (``KVManager.drop_paused`` / ``drop_idle``):
    (kind, sequence, time, the pause key it was held under (None: no pause's own))."""
    from sim.memory.kv_manager import KVManager

    log: list[tuple] = []
    paused, idle = KVManager.drop_paused, KVManager.drop_idle

    def drop_paused(kv):
        keys = {seq: hold.key for seq, hold in kv.paused.items()}
        seq = paused(kv)
        if seq is not None:
            log.append(("paused", seq, kv.now, keys[seq]))
        return seq

    def drop_idle(kv, seq):
        done = idle(kv, seq)
        if done:
            log.append(("idle", seq, kv.now, None))
        return done

    monkeypatch.setattr(KVManager, "drop_paused", drop_paused)
    monkeypatch.setattr(KVManager, "drop_idle", drop_idle)
    return log


@pytest.mark.parametrize(("kind", "trajectories"), [("hold", 20), ("offload_host", 24)])
def test_every_drop_is_booked_on_its_pause_at_its_time(monkeypatch, kind, trajectories):
    """agent_swarm_pressure (20 trajectories held, 24 offloaded: h99's runs): each drop of a paused trajectory's held KV
    notes "dropped under memory pressure" on the pause it was held under, with
    ``blocks_freed_s`` the drop's time (when the blocks left the pool), however the pause
    then ended (recomputed, or released / cancelled by the workload); each drop of a
    waiting turn's KV (resumed on held KV, or reloaded, and still queued) notes "... while
    its turn waited" on the pause that turn ends (recomputed). A reload's own drop (at a
    step boundary, nothing running) is booked and counted like the scheduler's.
    ``held_kv_drops`` counts them all, and
    also the drops of a fork held under its parent's hold (no pause of its own): the
    rows noting a drop are exactly the drops less those."""
    log = _logged_drops(monkeypatch)
    r = run("agent_swarm_pressure.yaml",
            **{"workload.num_trajectories": trajectories, "pause_policy.kind": kind})  # fmt: skip
    p = r.pauses
    assert r.summary["held_kv_drops"] == len(log) > 0
    noted = p[p.note.str.contains("dropped under memory pressure")]
    unowned = [d for d in log if d[0] == "paused" and d[3] is None]
    assert len(noted) == len(log) - len(unowned)
    for _, seq, t, _ in unowned:  # (a fork's: no row of its sequence booked at that time)
        assert not ((p.seq_id == str(seq)) & (p.blocks_freed_s == t)).any()
    for _, _seq, t, key in (d for d in log if d[0] == "paused" and d[3] is not None):
        row = p.iloc[key]
        assert row.blocks_freed_s == t and "dropped under memory pressure" in row.note
    waited = noted[noted.note.str.contains("while its turn waited")]
    idle = sorted((str(seq), t) for kind_, seq, t, _ in log if kind_ == "idle")
    assert sorted(zip(waited.seq_id, waited.blocks_freed_s, strict=True)) == idle
    assert (waited.outcome == "recomputed").all()
    assert r.summary["pauses_recomputed_after_drop"] == (noted.outcome == "recomputed").sum()


def test_a_recompute_frees_the_blocks_at_the_decision():
    """E24 under ``recompute``: the blocks leave the pool when the turn ends."""
    p = run(E24, **{"pause_policy.kind": "recompute"}).pauses.iloc[0]
    assert p.moved_to == "recompute" and p.blocks_freed_s == p.start_s and close(p.start_s, R)


def test_a_refused_turn_leaves_no_pause_waiting_for_its_admission():
    """E24 on a pool of 2,080 blocks (33,280 tokens): the first turn (32,768 tokens and
    one reply token: 2,049 blocks) fits; the next (+512 observation tokens: 33,281 tokens,
    2,081 blocks) never can, and is refused when the node takes it in. Its pause, resumed
    on held KV, no longer waits for an admission that cannot come (``_waiting`` empties:
    it lingered before), and says its turn was never admitted."""
    from sim.run import build

    pool = 2080 * 16 * BYTES_PER_TOKEN_GPU
    sim = build(str(WORKLOADS / E24), **{"hardware.kv_pool_bytes_per_gpu": pool,
                                         "engine.check_invariants": True})  # fmt: skip
    r = sim.run()
    assert r.summary["rejected"] == 1 and r.summary["held_kv_drops"] == 0
    assert sim.pauses._waiting == {} and sim.pauses._recomputing == {}
    (p,) = sim.pauses.pauses
    assert p.note == "its turn was never admitted" and close(p.tool_return_s, R + 45.0)
    assert p.outcome == "refused" and close(p.ended_s, R + 45.0)  # (it read resumed)


# h112: the pause lifecycle's loose ends, on E24 timelines of their own (2,500 blocks:
# 40,000 tokens, one 32,768-token context and a little; a 0.5 s link overhead per copy,
# which the speculative timer and the policy's reload time leave out)
POOL_2500 = 2500 * 16 * BYTES_PER_TOKEN_GPU
RELOAD_S = KV_BYTES / 8 / 64e9  # the policy's reload of 32,768 tokens: 20.97 ms
SLOW_LINK = {"hardware.host_link_overhead_s": 0.5, "hardware.kv_pool_bytes_per_gpu": POOL_2500}


def test_a_prefetch_dropped_after_its_tool_returned_is_booked_at_the_drop(monkeypatch):
    """offload_host, speculative with no margin, 3 turns: A's second pause (from A's second
    turn's end, t1; 33,281 tokens, reloaded in ``reload`` at 64 GB/s a GPU) prefetches at
    t1 + 45 - reload (the tool's minimum wait less the policy's reload time), and the
    copy-in takes reload + 0.5 s: A's tool returns (t1 + 45) during it, and its turn waits
    for the copy-in. B's first turn arrives at 91.9 s, inside that copy-in, on an idle
    node: its first 8,192-token chunk (512 blocks) does not fit beside A's prefetched
    33,281 tokens (2,081 blocks: 419 free), so the scheduler drops
    the prefetch, held while it copies in. The drop is booked then (blocks_freed_s 91.9 s,
    the note), and A's pause ends recomputed: all 33,281 tokens prefilled again (no prefix
    cache). Before h112 that drop was skipped (blocks_freed_s stayed at the copy-out)."""
    log = _logged_drops(monkeypatch)
    speculative = {"pause_policy.kind": "offload_host", "pause_policy.resume": "speculative",
                   "pause_policy.prefetch_margin_s": 0.0, "workload.turns": 3}  # fmt: skip
    r = two(91.9, **SLOW_LINK, **speculative)
    p = r.pauses.iloc[1]
    q = r.requests.set_index("req_id")
    t1 = q.loc[1].finish_s  # A's second turn ends: the pause starts
    assert p.traj_id == 0 and close(p.start_s, t1) and close(p.tool_return_s, t1 + 45.0)
    reload = (KV_TOKENS + 1 + 512) * BYTES_PER_TOKEN_GPU / 64e9  # 21.30 ms
    assert close(p.reload_start_s, t1 + 45.0 - reload)
    assert close(p.copy_in_done_s, p.reload_start_s + reload + 0.5)
    assert p.tool_return_s < 91.9 < p.copy_in_done_s  # dropped after the tool returned
    assert ("paused", p.seq_id, 91.9, 1) in [(k, str(s), t, key) for k, s, t, key in log]
    assert p.blocks_freed_s == 91.9 and "dropped under memory pressure" in p.note
    assert p.moved_to == "recompute" and p.outcome == "recomputed"
    assert p.recompute_tokens == KV_TOKENS + 1 + 512  # (the last token has no KV yet)
    assert p.resident_s > p.copy_in_done_s
    assert r.summary["pauses_recomputed_after_drop"] >= 1


def test_a_pipelined_turn_that_loses_its_kv_in_the_queue_ends_recomputed(monkeypatch):
    """offload_host, pipelined: A's tool returns at R + 45 s on an idle node, its reload
    takes the blocks (2,049) and the turn is released RELOAD_S + 0.5 s less its
    observation's prefill after that, while the copy-in still runs. B's first turn, here
    since 46.5 s, heads the queue and does not fit (512 blocks, 451 free) with nothing
    running: at A's release the scheduler drops the KV of the newest waiting turn, A's,
    and admits B. A's pause ends recomputed, the drop booked at that time with the note
    "... while its turn waited", its 32,768 tokens prefilled again after B's prefill
    (before h112 it ended ``reloaded``, the drop on no pause)."""
    log = _logged_drops(monkeypatch)
    r = two(46.5, **SLOW_LINK, **{"pause_policy.kind": "offload_host",
                                  "pause_policy.resume": "pipelined"})  # fmt: skip
    a = r.pauses.iloc[0]
    b_admitted = r.requests.set_index("req_id").loc[2].admitted_s  # B's first turn
    assert a.traj_id == 0 and close(a.reload_start_s, R + 45.0)
    assert close(a.copy_in_done_s, R + 45.0 + RELOAD_S + 0.5)
    assert R + 45.0 < b_admitted < a.copy_in_done_s  # released (and dropped) mid-copy
    assert [(k, str(s), t) for k, s, t, _ in log][0] == ("idle", a.seq_id, b_admitted)
    assert a.blocks_freed_s == b_admitted
    assert a.note == "dropped under memory pressure while its turn waited"
    assert a.moved_to == "recompute" and a.outcome == "recomputed"
    assert a.recompute_tokens == KV_TOKENS and close(a.recompute_s, R)
    assert a.resident_s > r.requests.set_index("req_id").loc[2].finish_s


@pytest.mark.parametrize(
    ("overrides", "refused_at"),
    [
        ({"pause_policy.kind": "recompute"}, "tool_return_s"),  # (it read open)
        ({"pause_policy.kind": "offload_host"}, "copy_in_done_s"),  # (it read reloaded)
        # refused while it streams in (it read reloaded); the copy-in ends after
        ({"pause_policy.kind": "offload_host", "pause_policy.resume": "pipelined"},
         "resident_s"),
    ],
)  # fmt: skip
def test_a_pause_whose_turn_is_refused_ends_refused(overrides, refused_at):
    """As the test above, under the other policies: the next turn (2,081 blocks) is refused
    when the node takes it in: at the tool's return (a recompute), once its context is
    copied back (a naive reload), or at its pipelined release, before the copy-in ends.
    Each pause ends ``refused`` at that time, and says its turn was never admitted."""
    pool = 2080 * 16 * BYTES_PER_TOKEN_GPU
    r = run(E24, **overrides, **{"hardware.kv_pool_bytes_per_gpu": pool})
    (p,) = r.pauses.itertuples()
    assert r.requests.finish_reason.tolist() == ["stop", "rejected_never_fits"]
    assert p.outcome == "refused" and p.note == "its turn was never admitted"
    assert close(p.tool_return_s, R + 45.0) and p.ended_s == getattr(p, refused_at)
    if p.moved_to == "offload_host":
        assert close(p.copy_in_done_s, R + 45.0 + RELOAD_S) and p.ended_s <= p.copy_in_done_s
    endings = r.summary["pause_endings"]
    assert endings["refused"] == 1 and sum(endings.values()) == 1


def test_pauses_key_their_waiting_turns_by_the_request_itself(monkeypatch):
    """The turns waiting for their admission (``_waiting``) or their recompute
    (``_recomputing``) are keyed by the request object (hashed by identity), each its own
    pause's next turn, which the pause keeps alive: no key can name another request.
    Checked at every admission of agent_swarm_pressure under ``hold`` (20 trajectories:
    turns resumed on held KV, and recomputes after drops). Before h112 the keys were
    ``id()``s; the same check (``key == id(p.next_req)``) held there too: an ``id()`` is
    reused only once its object is collected, and each key's request was alive (its
    pause's ``next_req``), so that keying was exact, only less evidently so."""
    from sim.engine.pauses import PauseLifecycle

    seen = {"waiting": 0, "recomputing": 0}
    admitted = PauseLifecycle.admitted

    def check(self, req, now):
        for name, entries in (("waiting", self._waiting), ("recomputing", self._recomputing)):
            for key, p in entries.items():
                assert key is p.next_req
                seen[name] += 1
        admitted(self, req, now)

    monkeypatch.setattr(PauseLifecycle, "admitted", check)
    run("agent_swarm_pressure.yaml", **{"workload.num_trajectories": 20})
    assert seen["waiting"] > 100 and seen["recomputing"] > 0


@pytest.mark.parametrize(
    ("overrides", "stall_s"),
    [
        ({"pause_policy.kind": "offload_host"}, RELOAD_S),  # the whole copy-in
        # released while the copy-in streams: the rest of the copy less the observation's
        # predicted prefill (``pipelined_release_delay_s``), as the row's own stall says
        ({"pause_policy.kind": "offload_host", "pause_policy.resume": "pipelined"}, None),
    ],
)  # fmt: skip
def test_a_refused_reloaded_pause_still_prices_the_wait_for_its_reload(overrides, stall_s):
    """h120: the turn of the tests above, refused once its context was copied back (or
    while it streamed in), waited for that reload as a turn that ran would: its realised
    cost (``policy_cost_s``, ``sim.policy.oracle.realised_cost``) is the HBM it held over
    the pool (pool-seconds) plus that stall (``resume_stall_s``), no recompute. h112's
    outcome ``refused`` dropped the stall (it was priced for outcome ``reloaded`` only):
    the naive reload cost 0.0206 s against the oracle's 0.0413 s for the same action
    (offload_host), less than its own HBM and copy-in; 0.0416 s before h112 and now.
    h122: the oracle prices a refused pause never resumed (its context was never needed
    again): recompute at 0 s (it priced the offload's 0.0413 s)."""
    pool = 2080 * 16 * BYTES_PER_TOKEN_GPU
    r = run(E24, **overrides, **{"hardware.kv_pool_bytes_per_gpu": pool})
    (p,) = r.pauses.itertuples()
    assert p.outcome == "refused" and p.moved_to == "offload_host"
    stall = p.resume_stall_s if stall_s is None else stall_s
    assert close(p.resume_stall_s, stall) and 0 < stall <= RELOAD_S
    hbm_s = p.paused_hbm_gb_s * 1e9 / (8 * pool)  # the replica's pool: 8 GPUs
    assert p.recompute_s == 0.0 and close(p.policy_cost_s, hbm_s + stall)
    assert p.oracle_action == "recompute" and p.oracle_cost_s == 0.0 < p.policy_cost_s
