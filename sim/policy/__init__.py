"""Pause policies: what happens to a trajectory's KV while its tool runs (F29-F33, rules 3.11-3.13).

Responsibility: ``PauseFacts`` (what the engine knows at a tool call) -> ``Decision``
(hold / recompute / offload_host / offload_nvme, with a prefetch plan or a TTL), by small
policy objects registered by name (``make_policy('break_even', horizon_s=30)``); tool-wait
prediction (``WaitPredictor``); the closed-form resume timelines (``resume_timeline``).

Invariant: pure: no SimPy, no clock, no imports from the engine; the pause economics come
from ``sim.sizing`` so the policies and ``kvsim breakeven`` agree.
"""

from sim.policy import break_even, fixed, min_waste, ttl_pin  # noqa: F401  (registers)
from sim.policy.base import (
    PausePolicy,
    PolicyOptions,
    PredictorOptions,
    make_policy,
    options_union,
    parse_options,
    policy_class,
    policy_names,
    register,
)
from sim.policy.facts import (
    ACTIONS,
    OFFLOAD_ACTIONS,
    RESUME_STRATEGIES,
    Decision,
    PauseFacts,
    PrefetchPlan,
)
from sim.policy.predict import PREDICT_MODES, ToolWaitStats, WaitPredictor
from sim.policy.resume import ResumeTimeline, plan_prefetch, resume_timeline, speculative_fire_s

__all__ = [
    "ACTIONS",
    "OFFLOAD_ACTIONS",
    "PREDICT_MODES",
    "RESUME_STRATEGIES",
    "Decision",
    "PausePolicy",
    "PauseFacts",
    "PolicyOptions",
    "PredictorOptions",
    "PrefetchPlan",
    "ResumeTimeline",
    "ToolWaitStats",
    "WaitPredictor",
    "make_policy",
    "options_union",
    "parse_options",
    "plan_prefetch",
    "policy_class",
    "policy_names",
    "register",
    "resume_timeline",
    "speculative_fire_s",
]
