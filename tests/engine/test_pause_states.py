"""The pause state machine: the transition table is walked, every move a run makes is an
edge of it, and an illegal move is an invariant failure."""

from __future__ import annotations

from collections import deque

import pytest
from engine_helpers import run

from sim.engine.pauses import TRANSITIONS, Pause, PauseState
from sim.engine.pauses.state import INITIAL, TERMINAL
from sim.errors import InvariantError

S = PauseState
E24 = "seed_tool_wait_45s.yaml"


def _reachable(start: PauseState) -> set[PauseState]:
    seen, todo = {start}, deque([start])
    while todo:
        for nxt in TRANSITIONS[todo.popleft()]:
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def test_the_table_covers_every_state_and_every_state_can_end():
    assert set(TRANSITIONS) == set(PauseState)
    assert _reachable(INITIAL) == set(PauseState)  # no dead state
    for state in PauseState:
        assert _reachable(state) & TERMINAL, f"{state} can never end"
    assert TERMINAL == {S.DONE, S.RESIDENT, S.GONE}
    assert all(not TRANSITIONS[t] for t in TERMINAL)


def test_an_illegal_move_is_an_invariant_failure():
    p = Pause(0, None, "s", 1, 1.0, 1.0, "hold", "", None, 0.0)
    p.to(S.DONE)
    with pytest.raises(InvariantError, match="pause 0: done -> held is not a transition"):
        p.to(S.HELD)


@pytest.fixture
def moves(monkeypatch):
    """Every (from, to) move pauses make during a test."""
    seen: list[tuple[PauseState, PauseState]] = []
    original = Pause.to

    def to(self, state):
        seen.append((self.state, state))
        original(self, state)

    monkeypatch.setattr(Pause, "to", to)
    return seen


@pytest.mark.parametrize(
    ("overrides", "path"),
    [
        ({"pause_policy.kind": "hold"}, [(S.HELD, S.HELD), (S.HELD, S.DONE)]),
        ({"pause_policy.kind": "recompute"}, [(S.HELD, S.RECOMPUTE), (S.RECOMPUTE, S.RECOMPUTE),
                                              (S.RECOMPUTE, S.DONE)]),
        (
            {"pause_policy.kind": "offload_host"},
            [(S.HELD, S.COPYING_OUT), (S.COPYING_OUT, S.OFFLOADED), (S.OFFLOADED, S.WAITING_HBM),
             (S.WAITING_HBM, S.COPYING_IN), (S.COPYING_IN, S.RESIDENT)],
        ),
        (
            {"pause_policy.kind": "offload_host", "pause_policy.resume": "pipelined"},
            [(S.HELD, S.COPYING_OUT), (S.COPYING_OUT, S.OFFLOADED), (S.OFFLOADED, S.WAITING_HBM),
             (S.WAITING_HBM, S.COPYING_IN), (S.COPYING_IN, S.STREAMING),
             (S.STREAMING, S.RESIDENT)],
        ),
    ],
)  # fmt: skip
def test_e24_pauses_walk_their_paths(moves, overrides, path):
    run(E24, **overrides)
    assert moves == path


def test_a_speculative_prefetch_resumes_from_prefetched(moves):
    over = {"pause_policy.kind": "offload_host", "workload.turns": 3}
    run(E24, **over, **{"pause_policy.resume": "speculative"})
    assert (S.COPYING_IN, S.PREFETCHED) in moves and (S.PREFETCHED, S.DONE) in moves


def test_every_pause_records_how_it_ended():
    """Fork- and prune-ended pauses included (they had no outcome before): a fork releases
    its parent's sequence, a losing branch is cancelled."""
    from sim.metrics.pauses import PAUSE_OUTCOMES

    r = run("agent_swarm.yaml", **{"workload.num_trajectories": 8})
    p = r.pauses
    assert set(p.outcome) <= set(PAUSE_OUTCOMES) and "open" not in set(p.outcome)
    ended_by_fork = p[p.outcome.isin(["released", "cancelled"])]
    assert len(ended_by_fork) > 0 and ended_by_fork.ended_s.notna().all()
    assert ended_by_fork.tool_return_s.isna().all()  # no next turn came for them
    assert r.summary["pause_endings"] == {o: int((p.outcome == o).sum()) for o in PAUSE_OUTCOMES}
    resumed = p[p.outcome == "resumed"]
    assert (resumed.ended_s == resumed.resident_s).all()
