"""``min_waste``: InferCept's rule (ICML 2024): preserve, discard or swap by least waste.

Responsibility: price every option in memory-time (byte-seconds of HBM that do no useful
work) and take the cheapest:
  * preserve waste = predicted remaining wait x state bytes (F29's C_hold);
  * discard waste  = recompute time x (state bytes + running batch bytes): while the state
    is rebuilt its own blocks fill up again and the running batch shares those steps with
    the recompute, so both are held for the recompute time (InferCept's
    T_fwd(C_i) x (C_i + C_other)); with no running batch it is recompute time x state;
  * swap waste     = round trip x state bytes (the blocks stay occupied while they are
    copied out and again while they are copied back), allowed only when the state's
    per-GPU bytes fit the per-step swap budget (what the link can move hidden behind the
    current step's compute) and host DRAM has room.
Several pauses in one step (``decide_many``) spend the budget on the most wasteful
(largest preserve waste) first, then each of the rest takes the cheaper of preserve and
discard, as InferCept does. An unknown wait preserves.

Invariant: the chosen action's waste is the minimum over the allowed options; the per-GPU
bytes granted to swaps in one ``decide_many`` never exceed the budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

from sim.policy.base import PausePolicy, PolicyOptions, register
from sim.policy.facts import Decision, PauseFacts


def preserve_waste_byte_s(facts: PauseFacts) -> float:
    """Predicted remaining wait x state bytes (inf when the wait is unknown)."""
    wait = facts.predicted_wait_s
    return math.inf if wait is None else facts.hold_byte_s(wait)


def discard_waste_byte_s(facts: PauseFacts) -> float:
    """Recompute time x (state bytes + running batch bytes)."""
    return facts.recompute_s * (facts.state_bytes_total + facts.running_batch_bytes)


def swap_waste_byte_s(facts: PauseFacts) -> float:
    """Round trip x state bytes: the blocks are held while they are copied out and back."""
    return facts.round_trip_s * facts.state_bytes_total


@register
class MinWaste(PausePolicy):
    """Least memory waste of preserve / discard / swap (InferCept)."""

    name = "min_waste"
    reads_running_batch = True  # discard's waste counts the running batch (InferCept)

    class Options(PolicyOptions):
        kind: Literal["min_waste"] = "min_waste"

    def decide(self, facts: PauseFacts) -> Decision:
        return self.decide_many([facts], facts.swap_budget_bytes_per_gpu)[0]

    def decide_many(
        self, facts: Sequence[PauseFacts], budget_bytes_per_gpu: float | None = None
    ) -> list[Decision]:
        """Pauses of one step; the budget defaults to the smallest one the facts carry."""
        if budget_bytes_per_gpu is None:
            budget_bytes_per_gpu = min((f.swap_budget_bytes_per_gpu for f in facts), default=0)
        left = budget_bytes_per_gpu
        host_left = min((f.host_free_bytes for f in facts), default=0.0)
        order = sorted(range(len(facts)), key=lambda i: -preserve_waste_byte_s(facts[i]))
        out: list[Decision | None] = [None] * len(facts)
        for i in order:
            f = facts[i]
            swap_ok = f.state_bytes_per_gpu <= left and f.state_bytes_total <= host_left
            out[i] = self._cheapest(f, swap_ok)
            if out[i].action == "offload_host":
                left -= f.state_bytes_per_gpu
                host_left -= f.state_bytes_total
        return out  # type: ignore[return-value]

    def _cheapest(self, facts: PauseFacts, swap_ok: bool) -> Decision:
        if facts.predicted_wait_s is None:
            return Decision("hold", "unknown wait: preserve")
        preserve = preserve_waste_byte_s(facts)
        discard = discard_waste_byte_s(facts)
        if swap_ok and swap_waste_byte_s(facts) < min(preserve, discard):
            return self.offload("offload_host", facts, "swap wastes least (within budget)")
        if discard < preserve:
            return Decision("recompute", "discard wastes less than preserve")
        return Decision("hold", "preserve wastes least")
