"""Fork branches held with their paused parent (``KVManager.fork`` of a held sequence):
the held byte-seconds no pause owns (``HeldTokenSeconds.unkeyed``, summary.json's
``fork_hold_gb_s``), and the warning that says when they dominate a run's held KV."""

from __future__ import annotations

import pytest

from sim.memory import make_allocator
from sim.memory.kv_manager import KVManager
from sim.metrics.summary import FORK_HOLD_WARN_SHARE, fork_hold_warning
from sim.sched.request import Request

B = 16


def test_branches_of_a_held_parent_hold_unkeyed_until_resumed():
    """A 100-token parent held at t = 1 (pause key "p"), forked at t = 2 into two
    branches, released at t = 2; branch a resumes at t = 5, branch b at t = 9. F29 by
    hand, in token-seconds: the pause 100 x (2 - 1) = 100; the branches, with no pause
    key, 100 x (5 - 2) + 100 x (9 - 2) = 1,000; both by the owner."""
    kv = KVManager(make_allocator("paged", pool_bytes=64 * B, kv_bytes_per_token=1.0, block_size=B))
    req = Request(1, "parent", 100, 1)
    assert kv.admit(req)
    kv.set_time(1.0)
    kv.hold("parent", 7, "p")
    kv.set_time(2.0)
    assert kv.fork("parent", "a") and kv.fork("parent", "b")
    kv.release("parent")
    kv.set_time(5.0)
    kv.resume("a")
    open_at_6 = kv.held_token_seconds(6.0)  # b still held: 100 x (6 - 2) so far
    assert open_at_6.unkeyed == pytest.approx(300 + 400)
    kv.set_time(9.0)
    kv.resume("b")
    held = kv.held_token_seconds(9.0)
    assert held.by_key == {"p": pytest.approx(100.0)}
    assert held.unkeyed == pytest.approx(1000.0)
    assert held.total == pytest.approx(1100.0) and held.by_owner == {7: pytest.approx(1100.0)}
    assert held.side_unkeyed == 0.0  # a dense model has no side groups


def _summary(policy: str, fork: float, held: float) -> dict:
    return {"pause_policy": policy, "fork_hold_gb_s": fork, "hold_gb_s": held}


def test_the_fork_hold_warning_rule():
    share = FORK_HOLD_WARN_SHARE
    assert fork_hold_warning(_summary("offload_host", 131.2, 143.0)).startswith(
        "fork branches: 131.2 of the 143.0 GB*s of held KV (92%"
    )
    assert fork_hold_warning(_summary("hold", 131.2, 143.0)) == ""  # holding is the policy
    assert fork_hold_warning(_summary("recompute", 0.0, 0.0)) == ""
    assert fork_hold_warning(_summary("offload_host", share * 100.0, 100.0)) == ""  # at the rule
    assert fork_hold_warning(_summary("offload_host", share * 100.0 + 0.1, 100.0)) != ""
