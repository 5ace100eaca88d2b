"""``break_even``: the chapter's decision regimes with shadow prices (F30-F33, rule 3.11).

Responsibility: pick the tier from the predicted wait W:
  1. W <= T*_host (F33 on the host link: round trip x mu_HBM/(mu_HBM - mu_DRAM) +
     Delta_T_stall) -> hold: offloading would stall the trajectory on its own state;
  2. W <= horizon (default 60 s) and host DRAM has room -> offload_host;
  3. escalate: the wait outlives the horizon, or host DRAM is short -> offload_nvme when
     NVMe has room and W > T*_nvme (the same F33 over the NVMe path);
  4. otherwise host DRAM if it has room (no usable NVMe);
  5. nowhere to park it (sim decision): recompute when W exceeds the recompute time (the
     drop costs less stall than the wait it frees memory for), else hold.
A tier counts as usable only if it has room and reloads faster than the recompute (F31;
rule 3.11.2: recompute is "appropriate ... when reload is not faster"): a slower one is
passed over for the other tier, and with neither usable the pause goes to 5 before the
round-trip test of 1 (holding for a round trip no copy will make would only keep HBM
from the drop that frees it at once, at a resume no slower).
An unknown wait (tool never seen, no prior) holds: a short-wait mistake then costs memory
only, never a stall.

Invariant: never offloads to a tier without room, nor to one it reloads from no faster
than it recomputes, and never drops where a usable tier would park the state; the thresholds are ``sim.sizing``'s ``break_even_wait_s``, and
``kvsim breakeven`` asks this very ``decide`` (``sim.policy.analytic``), so the command and
the engine agree on T* and on the decision for the same facts.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field, model_validator

from sim.policy.base import PausePolicy, PolicyOptions, register
from sim.policy.facts import Decision, PauseFacts
from sim.sizing import break_even_wait_s


@register
class BreakEven(PausePolicy):
    """Hold under the round trip, host DRAM up to a horizon, NVMe beyond."""

    reads_running_batch = False  # never reads PauseFacts.running_batch_bytes

    name = "break_even"

    class Options(PolicyOptions):
        kind: Literal["break_even"] = "break_even"
        horizon_s: float = Field(60.0, gt=0)  # longest wait parked in host DRAM
        mu_hbm: float = Field(1.0, gt=0)  # shadow price of HBM, per byte-second
        mu_dram: float = Field(0.0, ge=0)  # shadow price of host DRAM (0: free)
        stall_s: float = Field(0.0, ge=0)  # Delta_T_stall the scheduler accepts
        host_reserve_bytes: float = Field(0.0, ge=0)  # host DRAM kept free ("short" below it)

        @model_validator(mode="after")
        def _prices(self):
            if self.mu_dram >= self.mu_hbm:
                raise ValueError("mu_dram must be below mu_hbm (host memory is the cheaper tier)")
            return self

    @property
    def mu_ratio(self) -> float:
        o = self.options
        return math.inf if o.mu_dram == 0 else o.mu_hbm / o.mu_dram

    def host_threshold_s(self, facts: PauseFacts) -> float:
        """T*_host (F33) for this state over the host link."""
        return break_even_wait_s(
            facts.state_bytes_per_gpu,
            facts.link_bw_bytes_per_s,
            self.mu_ratio,
            self.options.stall_s,
        )

    def nvme_threshold_s(self, facts: PauseFacts) -> float:
        """T*_nvme: F33 with the NVMe path's round trip in place of the link's."""
        factor = 1.0 if math.isinf(self.mu_ratio) else self.mu_ratio / (self.mu_ratio - 1)
        return facts.nvme_round_trip_s * factor + self.options.stall_s

    def decide(self, facts: PauseFacts) -> Decision:
        wait = facts.predicted_wait_s
        if wait is None:
            return Decision("hold", "unknown wait: hold")
        host_room = facts.host_fits(self.options.host_reserve_bytes)
        nvme_room = facts.nvme_fits()
        host = host_room and self.faster("offload_host", facts)
        nvme = nvme_room and self.faster("offload_nvme", facts)
        if not (host or nvme):
            slow = host_room or nvme_room  # room, but no reload faster than the recompute
            return self.nowhere(wait, facts, slow)
        if wait <= self.host_threshold_s(facts):
            return Decision("hold", "wait under the break-even (round trip)")
        if wait <= self.options.horizon_s and host:
            return self.offload("offload_host", facts, "wait within the host horizon")
        if nvme and wait > self.nvme_threshold_s(facts):
            # (NVMe's reload is the host link's and the drives': never faster than host
            # DRAM's, so a usable NVMe beside unusable host DRAM means host DRAM is short)
            why = "wait beyond the host horizon" if host else "host DRAM short"
            return self.offload("offload_nvme", facts, f"{why}: NVMe")
        if host:
            return self.offload("offload_host", facts, "beyond the horizon, no usable NVMe")
        return self.nowhere(wait, facts, slow=True)

    @staticmethod
    def faster(tier: str, facts: PauseFacts) -> bool:
        """Whether reloading from ``tier`` beats recomputing the state (F31, rule 3.11.2)."""
        return facts.reload_s_for(tier) < facts.recompute_s

    @staticmethod
    def nowhere(wait: float, facts: PauseFacts, slow: bool) -> Decision:
        """Step 5: no usable tier (none with room, or, ``slow``, none with room that
        reloads faster than the recompute, F31): drop when the wait exceeds the recompute
        time, else hold."""
        why = "no tier with room reloads faster than recompute (F31)" if slow else "no tier has room"
        if wait > facts.recompute_s:
            return Decision("recompute", f"{why}: drop (recompute < wait)")
        return Decision("hold", f"{why}: hold (wait < recompute)")
