"""``retain_priority`` through the engine (issue 28 follow-up): the ``hints`` policy hands
each pause's priority to the KV manager and the radix cache; a priority every session
shares orders nothing, so the run is the one without it."""

from __future__ import annotations

from engine_helpers import assert_same_frame, assert_same_summary, run

E24 = "seed_tool_wait_45s.yaml"
RADIX = {
    "workload.turns": 3, "workload.num_trajectories": 2, "allocator.kind": "radix",
    "pause_policy.kind": "hints", "workload.hints.source": "exact",
    "pause_policy.no_hint": "recompute",
}  # fmt: skip


def test_a_priority_all_sessions_share_changes_no_result():
    plain = run(E24, **RADIX)
    shared = run(E24, **RADIX, **{"workload.hints.retain_priority": 3.0})
    assert list(shared.pauses.hint) == [
        h.replace("demote", "retain=3 demote") for h in plain.pauses.hint
    ]
    assert plain.summary["prefix_evicted_blocks"] > 0  # the cache did evict: the bias was asked
    assert_same_summary(plain.summary, shared.summary)
    assert_same_frame(plain.pauses.drop(columns="hint"), shared.pauses.drop(columns="hint"))
