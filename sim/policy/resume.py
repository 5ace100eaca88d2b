"""Resume paths for offloaded state (rule 3.13): naive, speculative prefetch, pipelined.

Responsibility: when the reload of an offloaded state starts, when it ends, how long the
trajectory stalls on it after its tool returns, and how long HBM is taken back before the
tool returns; the engine's copy engines realise the same timeline, these closed forms plan
it and check it.

Times are seconds after the pause starts (the tool call). ``egress_s`` is when the copy-out
completes: nothing can be reloaded before it. ``wait_s`` is the actual tool wait.

Invariant: ``stall_s >= 0``, ``early_hbm_s >= 0``, and the reload never starts before the
copy-out is done:
  * naive:       start = max(wait, egress); stall = start + reload - wait
  * speculative: start = max(egress, min(fire, wait)) (a tool returning before the timer
                 starts the reload at once); stall = max(0, start + reload - wait);
                 HBM is taken early for max(0, wait - start)
  * pipelined:   start = max(wait, egress); the observation's prefill overlaps the copy,
                 stall = (start - wait) + max(0, reload - overlappable prefill time)
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.policy.facts import PauseFacts, PrefetchPlan


@dataclass(frozen=True, slots=True)
class ResumeTimeline:
    """One resume, seconds after the pause starts."""

    reload_start_s: float  # copy-in starts (HBM blocks are taken from here on)
    reload_done_s: float  # copy-in complete
    stall_s: float  # tool return -> the context before the observation is usable
    early_hbm_s: float  # HBM held before the tool returned (speculative prefetch)


def speculative_fire_s(
    t_min_s: float, reload_s: float, margin_s: float, egress_s: float = 0.0
) -> float:
    """Timer for the early prefetch: ``T_min - T_reload - margin``, not before the copy-out."""
    return max(egress_s, t_min_s - reload_s - margin_s, 0.0)


def resume_timeline(
    plan: PrefetchPlan | None,
    *,
    wait_s: float,
    reload_s: float,
    egress_s: float = 0.0,
    overlappable_prefill_s: float = 0.0,
) -> ResumeTimeline:
    """The resume of one offloaded state under ``plan`` (None = naive)."""
    if min(wait_s, reload_s, egress_s, overlappable_prefill_s) < 0:
        raise ValueError("times must be >= 0")
    strategy = "naive" if plan is None else plan.strategy
    if strategy == "speculative":
        start = max(egress_s, min(plan.fire_after_s, wait_s))
    else:
        start = max(wait_s, egress_s)
    done = start + reload_s
    if strategy == "pipelined":
        stall = (start - wait_s) + max(0.0, reload_s - overlappable_prefill_s)
    else:
        stall = max(0.0, done - wait_s)
    return ResumeTimeline(start, done, stall, max(0.0, wait_s - start))


def plan_prefetch(
    strategy: str, facts: PauseFacts, action: str, margin_s: float
) -> PrefetchPlan | None:
    """The prefetch plan an offload policy attaches; None for actions that keep/drop state.

    A speculative plan needs the tool's observed minimum wait; without one (a tool never
    seen) it falls back to the naive path, as a profiler with no samples would.
    """
    if action not in ("offload_host", "offload_nvme"):
        return None
    if strategy == "speculative":
        if facts.tool_min_wait_s is None:
            return PrefetchPlan("naive")
        reload_s = facts.reload_s_for(action)
        fire = speculative_fire_s(facts.tool_min_wait_s, reload_s, margin_s, egress_s=reload_s)
        return PrefetchPlan("speculative", fire)
    return PrefetchPlan(strategy)
