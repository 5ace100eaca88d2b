"""``ttl_pin``: Continuum's rule (2025): pin a short tool call's KV for a time-to-live.

Responsibility: at a tool call, keep the KV resident for ``ttl_s`` (default 2 s) when the
tool's predicted wait (its running mean in the default predictor) is at most
``short_wait_s`` (default 2 s) or the tool is unknown, and never on a trajectory's last
step; if the tool has not returned when the TTL expires the engine applies ``fallback``
(default ``recompute``: Continuum hands the state back to vLLM's ordinary eviction). A
long tool is released at once by the fallback. (Continuum also schedules pinned
trajectories first when they resume; that is the scheduler's business, not this one's.)

Invariant: the answer is ``hold`` with a TTL and a release action, or the fallback itself;
an offload fallback to a tier without room becomes ``recompute``.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.policy.base import PausePolicy, PolicyOptions, register
from sim.policy.facts import Decision, PauseFacts
from sim.policy.resume import plan_prefetch


@register
class TtlPin(PausePolicy):
    """Keep resident for a TTL when the tool is short (or unknown), then release."""

    reads_running_batch = False  # never reads PauseFacts.running_batch_bytes

    name = "ttl_pin"

    class Options(PolicyOptions):
        kind: Literal["ttl_pin"] = "ttl_pin"
        ttl_s: float = Field(2.0, ge=0)
        short_wait_s: float = Field(2.0, ge=0)  # pin when the predicted wait is at most this
        fallback: Literal["recompute", "offload_host", "offload_nvme"] = "recompute"

    def _release(self, facts: PauseFacts) -> str:
        fb = self.options.fallback
        if fb == "offload_host" and not facts.host_fits():
            return "recompute"
        if fb == "offload_nvme" and not facts.nvme_fits():
            return "recompute"
        return fb

    def decide(self, facts: PauseFacts) -> Decision:
        release = self._release(facts)
        plan = plan_prefetch(self.options.resume, facts, release, self.options.prefetch_margin_s)
        wait = facts.predicted_wait_s
        if facts.is_last_turn:
            return Decision(release, "last step: never pinned", prefetch=plan)
        if wait is None or wait <= self.options.short_wait_s:
            why = "unknown tool" if wait is None else "short tool"
            return Decision(
                "hold",
                f"{why}: pin for the TTL",
                prefetch=plan,
                ttl_s=self.options.ttl_s,
                release=release,
            )
        return Decision(release, "long tool: release now", prefetch=plan)
