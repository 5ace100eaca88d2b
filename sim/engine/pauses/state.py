"""One pause's state machine: the states, the legal transitions, and the pause record.

Responsibility: ``PauseState`` (an Enum) and ``TRANSITIONS`` (the only moves a pause may
make, walked by ``tests/engine/test_pause_states.py``), and ``Pause``: everything known
about one tool call's pause, from the end of its turn until the next turn's context is
resident, changed only through ``Pause.to``.

Invariant: a pause is in exactly one state; every change of state is an edge of
``TRANSITIONS`` (anything else raises ``InvariantError``); ``DONE``, ``RESIDENT`` and
``GONE`` are terminal.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from sim.errors import InvariantError
from sim.memory.tiers import FramePool
from sim.policy import PauseFacts

NAN = math.nan


class PauseState(Enum):
    """Where a paused trajectory's KV is, and what the pause waits for."""

    HELD = "held"  # resident in HBM (hold, or an offload with no room at copy time)
    COPYING_OUT = "copying_out"  # resident, its copy to host DRAM / NVMe running
    OFFLOADED = "offloaded"  # in host DRAM / NVMe only; HBM blocks freed
    WAITING_HBM = "waiting_hbm"  # the reload waits for HBM blocks
    COPYING_IN = "copying_in"  # HBM blocks taken, the copy back running
    STREAMING = "streaming"  # pipelined: the turn went on while the copy-in finishes
    PREFETCHED = "prefetched"  # reloaded before its tool returned
    RECOMPUTE = "recompute"  # dropped: the next turn prefills the context again
    RESIDENT = "resident"  # reloaded and its turn submitted (terminal)
    DONE = "done"  # the next turn found its context resident (terminal)
    GONE = "gone"  # the workload released the sequence (terminal)


S = PauseState
#: state -> the states it may move to
TRANSITIONS: dict[PauseState, frozenset[PauseState]] = {
    S.HELD: frozenset({S.HELD, S.COPYING_OUT, S.RECOMPUTE, S.DONE, S.GONE}),
    S.COPYING_OUT: frozenset({S.OFFLOADED, S.RECOMPUTE, S.DONE, S.GONE}),
    S.OFFLOADED: frozenset({S.WAITING_HBM, S.GONE}),
    S.WAITING_HBM: frozenset({S.COPYING_IN, S.OFFLOADED, S.RECOMPUTE, S.GONE}),
    S.COPYING_IN: frozenset({S.STREAMING, S.RESIDENT, S.PREFETCHED, S.RECOMPUTE, S.GONE}),
    S.STREAMING: frozenset({S.RESIDENT, S.GONE}),
    S.PREFETCHED: frozenset({S.DONE, S.RECOMPUTE, S.GONE}),
    S.RECOMPUTE: frozenset({S.RECOMPUTE, S.DONE, S.GONE}),
    S.RESIDENT: frozenset(),
    S.DONE: frozenset(),
    S.GONE: frozenset(),
}
#: the outcome a terminal state records (DONE: resumed or recomputed, by ``moved_to``)
_OUTCOMES = {S.RESIDENT: "reloaded", S.GONE: "released"}
#: a pause starts here (the decision then moves it)
INITIAL = S.HELD
TERMINAL = frozenset(s for s, nxt in TRANSITIONS.items() if not nxt)
#: states whose KV is (being) kept off HBM, in host DRAM or on NVMe
AWAY = frozenset({S.OFFLOADED, S.WAITING_HBM})


@dataclass(slots=True)
class Pause:
    """One tool call's pause, from the turn's end to the next turn's context being resident.

    Times are simulated seconds (NaN = did not happen); ``moved_to`` is where the state
    finally went (hold, recompute, offload_host, offload_nvme)."""

    pause_id: int
    req: Any  # the turn that ended (a ``sim.sched.Request``)
    seq: Hashable
    tokens: int
    bytes_per_gpu: float  # what each GPU moves over its link
    bytes_total: float  # what the replica stores (host DRAM / NVMe)
    action: str  # the policy's first answer
    reason: str
    predicted_wait_s: float | None
    start_s: float
    state: PauseState = INITIAL
    moved_to: str = ""
    release: str | None = None  # TTL hold: the action at expiry
    prefetch: Any = None  # the decision's PrefetchPlan (offloads)
    facts: PauseFacts | None = None  # what the policy saw (the pipelined release reads it)
    awaited: bool = False  # a turn waits for this copy-in (counted in ``copies_in``)
    pool: FramePool | None = None
    copy_out_done_s: float = NAN
    freed_s: float = NAN
    tool_return_s: float = NAN  # the next turn's arrival (the harness's submission)
    taken_in_s: float = NAN  # when the engine took that turn in (a step boundary after it)
    reload_start_s: float = NAN
    copy_in_done_s: float = NAN
    resident_s: float = NAN
    ended_s: float = NAN  # the workload released or cancelled the sequence (GONE), or
    # its next turn was refused or cancelled before its context was resident again
    next_req: Any = None
    bytes_out: float = 0.0
    bytes_in: float = 0.0
    recompute_tokens: int = 0  # the context less the prefix still cached at re-admission
    # the step pricer's price of prefilling them over that prefix, alone in the scheduler's
    # chunks (PauseDecider.recompute_price): FLOPs over the replica, and seconds
    recompute_flops: float = 0.0
    recompute_s: float = 0.0
    note: str = ""
    hint_refused: str = ""  # the part of the pause's KV hint not honoured, and why
    #: how the pause ended: resumed (its KV was resident at tool return and still at its
    #: turn's admission), reloaded (copied
    #: back), recomputed, released (the workload let the sequence go: a fork's parent, a
    #: compaction, an ended trajectory), cancelled (a pruned branch: its sequence, or its
    #: next turn before that turn's context was resident again), refused (its next
    #: turn was refused: at submission, at admission or by a cluster's router); "" while
    #: open
    outcome: str = ""

    def to(self, state: PauseState) -> None:
        """Move to ``state`` along an edge of ``TRANSITIONS``."""
        if state not in TRANSITIONS[self.state]:
            raise InvariantError(
                f"pause {self.pause_id}: {self.state.value} -> {state.value} is not a transition"
            )
        self.state = state
        if self.outcome:  # set before its terminal state (a refused turn, a drop while
            return  # a pipelined turn waited): kept
        if state in _OUTCOMES:
            self.outcome = _OUTCOMES[state]
        elif state == S.DONE:
            self.outcome = "recomputed" if self.moved_to == "recompute" else "resumed"

    @property
    def open(self) -> bool:
        """Not in a terminal state."""
        return self.state not in TERMINAL
