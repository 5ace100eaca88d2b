"""The resume-timing job of a pause: when a reload starts and when its turn may go on.

Responsibility: the closed forms of rule 3.13 as the engine applies them: the speculative
prefetch timer's delay, and the pipelined release (the turn is submitted once the rest of
the copy-in is at most the predicted prefill of its observation, priced by the cost model
in the scheduler's own chunks, as if alone in its batch: the chapter's simplification).

Invariant: pure functions of a pause, the scheduler's chunking answer and the cost model;
no time passes here.
"""

from __future__ import annotations

from typing import Any

from sim.cost import StepWork
from sim.engine.pauses.state import Pause
from sim.sched import Scheduler


def prefetch_delay_s(p: Pause, now: float) -> float:
    """Seconds from ``now`` until a speculative prefetch of ``p`` fires."""
    return max(0.0, p.start_s + p.prefetch.fire_after_s - now)


def observation_prefill_s(p: Pause, sched: Scheduler, cost: Any) -> float:
    """The cost model's time for the next turn's new tokens (its observation), prefilled
    alone in the scheduler's chunks after the reloaded context."""
    cached, rest = p.tokens, max(0, p.next_req.prompt_tokens - p.tokens)
    total = 0.0
    for n in sched.prefill_chunks(cached, rest):
        total += cost.iteration_time(StepWork(0, 0, ((n, cached),))).total_s
        cached += n
    return total


def pipelined_release_delay_s(
    p: Pause, sched: Scheduler, cost: Any, link_overhead_s: float
) -> float:
    """Seconds from the copy-in's start until the turn may be submitted (pipelined)."""
    reload_s = p.facts.reload_s_for(p.moved_to) + link_overhead_s
    return max(0.0, reload_s - observation_prefill_s(p, sched, cost))
