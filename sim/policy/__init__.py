"""Pause policies: what happens to a trajectory's KV while its tool runs (F29-F33, rules 3.11-3.13).

Responsibility: ``PauseFacts`` (what the engine knows at a tool call) -> ``Decision``
(hold / recompute / offload_host / offload_nvme, with a prefetch plan or a TTL), by small
policy objects registered by name (``make_policy('break_even', horizon_s=30)``); the agent
harness's KV hints (``KVHint``, honoured by the ``hints`` policy); the pause oracle's prices
(``oracle_cost``, ``realised_cost``); tool-wait
prediction (``WaitPredictor``); the closed-form resume timelines (``resume_timeline``).

Invariant: pure: no SimPy, no clock, no imports from the engine; the pause economics come
from ``sim.sizing``, and ``kvsim breakeven`` asks ``break_even`` itself
(``sim.policy.analytic``), so the command and the engine agree. The policies' own
modules are imported by name when a policy is asked for (``sim.policy.registry``), not by
this package's import.
"""

from sim.policy.base import (
    PausePolicy,
    PolicyOptions,
    PredictorOptions,
    parse_options,
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
from sim.policy.hint import DEMOTE_TIERS, KVHint
from sim.policy.oracle import PauseCost, action_costs, oracle_cost, realised_cost
from sim.policy.predict import PREDICT_MODES, ToolWaitStats, WaitPredictor
from sim.policy.registry import make_policy, options_union, policy_class, policy_names
from sim.policy.resume import ResumeTimeline, plan_prefetch, resume_timeline, speculative_fire_s

__all__ = [
    "ACTIONS",
    "DEMOTE_TIERS",
    "OFFLOAD_ACTIONS",
    "PREDICT_MODES",
    "RESUME_STRATEGIES",
    "Decision",
    "KVHint",
    "PauseCost",
    "PausePolicy",
    "PauseFacts",
    "PolicyOptions",
    "PredictorOptions",
    "PrefetchPlan",
    "ResumeTimeline",
    "ToolWaitStats",
    "WaitPredictor",
    "action_costs",
    "make_policy",
    "oracle_cost",
    "options_union",
    "parse_options",
    "plan_prefetch",
    "policy_class",
    "policy_names",
    "realised_cost",
    "register",
    "resume_timeline",
    "speculative_fire_s",
]
