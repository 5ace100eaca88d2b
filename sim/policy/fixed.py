"""The four single-action policies of rule 3.11: hold, recompute, offload_host, offload_nvme.

Responsibility: the chapter's static baselines, each answering the same action at every
pause. An offload whose tier has no room for the state falls back to ``when_full``
(default ``hold``, the only answer that needs no room anywhere); the fallback is recorded
in the decision's reason.

Invariant: a fixed policy never answers an offload to a tier the facts say is full.
"""

from __future__ import annotations

from typing import Literal

from sim.policy.base import PausePolicy, PolicyOptions, register
from sim.policy.facts import Decision, PauseFacts


@register
class Hold(PausePolicy):
    """Keep every block resident: no stall on resume, memory-time C_hold = M_KV x T_wait."""

    reads_running_batch = False  # never reads PauseFacts.running_batch_bytes

    name = "hold"
    reloads_kv = False  # the context stays in HBM (or is dropped under pressure)

    class Options(PolicyOptions):
        kind: Literal["hold"] = "hold"

    def decide(self, facts: PauseFacts) -> Decision:
        return Decision("hold", "always hold")


@register
class Recompute(PausePolicy):
    """Free the blocks at once and prefill the whole context again on resume.

    ``evict_from_prefix_cache: true`` also removes the dropped blocks from a prefix cache,
    so the recompute is real even with a radix cache (otherwise cached blocks may hit).
    """

    reads_running_batch = False  # never reads PauseFacts.running_batch_bytes

    name = "recompute"
    reloads_kv = False  # the context is prefilled again, never copied back

    class Options(PolicyOptions):
        kind: Literal["recompute"] = "recompute"
        evict_from_prefix_cache: bool = False

    def decide(self, facts: PauseFacts) -> Decision:
        return Decision(
            "recompute",
            "always recompute",
            evict_from_prefix_cache=self.options.evict_from_prefix_cache,
        )


@register
class OffloadHost(PausePolicy):
    """Copy the blocks to pinned host DRAM; free HBM when the copy-out completes."""

    reads_running_batch = False  # never reads PauseFacts.running_batch_bytes

    name = "offload_host"

    class Options(PolicyOptions):
        kind: Literal["offload_host"] = "offload_host"
        when_full: Literal["hold", "recompute", "offload_nvme"] = "hold"

    def decide(self, facts: PauseFacts) -> Decision:
        if facts.host_fits():
            return self.offload("offload_host", facts, "always offload to host")
        return _fallback(self, facts, "host DRAM full")


@register
class OffloadNvme(PausePolicy):
    """Move the blocks to NVMe (through host memory, or GPUDirect Storage)."""

    reads_running_batch = False  # never reads PauseFacts.running_batch_bytes

    name = "offload_nvme"

    class Options(PolicyOptions):
        kind: Literal["offload_nvme"] = "offload_nvme"
        when_full: Literal["hold", "recompute", "offload_host"] = "hold"

    def decide(self, facts: PauseFacts) -> Decision:
        if facts.nvme_fits():
            return self.offload("offload_nvme", facts, "always offload to NVMe")
        return _fallback(self, facts, "NVMe full or absent")


def _fallback(policy: PausePolicy, facts: PauseFacts, why: str) -> Decision:
    action = policy.options.when_full
    reason = f"{why}: {action}"
    if action == "offload_nvme" and facts.nvme_fits():
        return policy.offload(action, facts, reason)
    if action == "offload_host" and facts.host_fits():
        return policy.offload(action, facts, reason)
    if action in ("hold", "recompute"):
        return Decision(action, reason)
    return Decision("hold", f"{why}; fallback tier full too: hold")
