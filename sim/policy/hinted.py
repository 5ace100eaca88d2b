"""``hints``: honour the agent harness's KV hints (``KVHint``) within memory limits.

Responsibility: turn the hint a pause carries into a decision:
  * ``release`` -> ``recompute`` with the blocks dropped from a prefix cache too (nothing will
    reuse them);
  * ``pin_for_s`` -> hold for the lease (a TTL), then fall back: to the ``demote`` tier when
    the hint names one and it has room, else to ``fallback``; a pin is refused when the
    HBM KV pool's free share is below ``min_free_fraction`` unless the hint's
    ``retain_priority`` is at least ``retain_override`` (the Retain bias of vLLM #51428);
  * ``demote`` -> offload to the named tier when it has room (refused otherwise);
  * ``prefetch_at_s`` -> the offload's reload is timed to end ``prefetch_margin_s`` before
    that moment (a speculative plan firing at ``prefetch_at_s - T_reload - margin``, never
    before the copy-out ends); without it the policy's ``resume`` strategy applies.
A pause without a hint takes ``no_hint``; a refused hint takes ``fallback``. Each refusal is
named in the decision's ``hint_refused`` (counted as ``hints_refused`` in summary.json).

Invariant: never offloads to a tier the facts say is full (a fallback to a full tier becomes
``recompute``); the answer is a pure function of the facts and the options.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.policy.base import PausePolicy, PolicyOptions, register
from sim.policy.facts import Action, Decision, PauseFacts, PrefetchPlan
from sim.policy.hint import KVHint
from sim.policy.resume import plan_prefetch, speculative_fire_s

Fallback = Literal["recompute", "offload_host", "offload_nvme"]


@register
class Hints(PausePolicy):
    """Pin, demote, prefetch and release as the harness says, when memory allows."""

    reads_running_batch = False  # never reads PauseFacts.running_batch_bytes

    name = "hints"

    class Options(PolicyOptions):
        kind: Literal["hints"] = "hints"
        no_hint: Literal["hold", "recompute", "offload_host", "offload_nvme"] = "hold"
        fallback: Fallback = "recompute"  # after a lease, or for a refused hint
        min_free_fraction: float = Field(0.1, ge=0, le=1)  # pins refused below this HBM share
        retain_override: float = 1.0  # a retain_priority at least this pins under pressure

    options: Options  # the validated options (``make_policy`` builds them from this model)

    def decide(self, facts: PauseFacts) -> Decision:
        h = facts.hint
        if h is None:
            return self._plain(facts, self.options.no_hint, "no hint")
        if h.release:
            return Decision("recompute", "hint: release", evict_from_prefix_cache=True)
        refused: list[str] = []
        if h.pin_for_s is not None:
            if self._pin_allowed(facts, h):
                return self._pin(facts, h)
            refused.append("pin: HBM short")
        action = h.demote_action
        if action is not None:
            if _fits(facts, action):
                return Decision(
                    action, "hint: demote", prefetch=self._plan(facts, h, action),
                    hint_refused="; ".join(refused),
                )  # fmt: skip
            refused.append(f"demote: {h.demote} full")
        if not refused:  # retain_priority or prefetch_at_s alone: nothing to move
            return self._plain(facts, self.options.no_hint, "hint without pin or demote")
        d = self._plain(facts, self.options.fallback, "hint refused")
        return Decision(d.action, d.reason, prefetch=d.prefetch, hint_refused="; ".join(refused))

    # ------------------------------------------------------------------ parts
    def _pin_allowed(self, facts: PauseFacts, h: KVHint) -> bool:
        o = self.options
        return facts.hbm_free_fraction >= o.min_free_fraction or h.retain_priority >= (
            o.retain_override
        )

    def _pin(self, facts: PauseFacts, h: KVHint) -> Decision:
        """Hold for the lease; then the demote tier (if it has room) or the fallback."""
        after: Action = self.options.fallback
        why = ""
        demote = h.demote_action
        if demote is not None:
            if _fits(facts, demote):
                after = demote
            else:
                why = f"demote after the lease: {h.demote} full"
        if not _fits(facts, after):
            after = "recompute"
        return Decision(
            "hold", "hint: pin for the lease", prefetch=self._plan(facts, h, after),
            ttl_s=h.pin_for_s, release=after, hint_refused=why,
        )  # fmt: skip

    def _plan(self, facts: PauseFacts, h: KVHint, action: str) -> PrefetchPlan | None:
        """The reload plan of an offload: timed by ``prefetch_at_s`` when the hint has it."""
        if action not in ("offload_host", "offload_nvme"):
            return None
        if h.prefetch_at_s is None:
            return plan_prefetch(self.options.resume, facts, action, self.options.prefetch_margin_s)
        reload_s = facts.reload_s_for(action)
        fire = speculative_fire_s(
            h.prefetch_at_s, reload_s, self.options.prefetch_margin_s, egress_s=reload_s
        )
        return PrefetchPlan("speculative", fire)

    def _plain(self, facts: PauseFacts, action: Action, why: str) -> Decision:
        """``action`` without a hint's timing; a full tier becomes recompute."""
        if action == "hold":
            return Decision("hold", f"{why}: hold")
        if action == "recompute":
            return Decision("recompute", f"{why}: recompute")
        if not _fits(facts, action):
            return Decision("recompute", f"{why}: {action} full, recompute")
        return self.offload(action, facts, f"{why}: {action}")


def _fits(facts: PauseFacts, action: str) -> bool:
    if action == "offload_host":
        return facts.host_fits()
    if action == "offload_nvme":
        return facts.nvme_fits()
    return True
