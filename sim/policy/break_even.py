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
Where 2-4 pick a tier whose reload is not faster than the recompute (F31; rule 3.11.2:
recompute is "appropriate ... when reload is not faster"), the state is dropped instead:
HBM is freed at once, the resume is no slower, and no tier holds the state.
An unknown wait (tool never seen, no prior) holds: a short-wait mistake then costs memory
only, never a stall.

Invariant: never offloads to a tier without room, nor to one it reloads from no faster
than it recomputes; the thresholds are ``sim.sizing``'s ``break_even_wait_s``, and
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
        if wait <= self.host_threshold_s(facts):
            return Decision("hold", "wait under the break-even (round trip)")
        host_ok = facts.host_fits(self.options.host_reserve_bytes)
        if wait <= self.options.horizon_s and host_ok:
            return self.park("offload_host", facts, "wait within the host horizon")
        if facts.nvme_fits() and wait > self.nvme_threshold_s(facts):
            why = "host DRAM short" if not host_ok else "wait beyond the host horizon"
            return self.park("offload_nvme", facts, f"{why}: NVMe")
        if host_ok:
            return self.park("offload_host", facts, "beyond the horizon, no usable NVMe")
        if wait > facts.recompute_s:
            return Decision("recompute", "no tier has room: drop (recompute < wait)")
        return Decision("hold", "no tier has room: hold (wait < recompute)")

    def park(self, tier: str, facts: PauseFacts, reason: str) -> Decision:
        """Offload to ``tier``, unless reloading from it is not faster than recomputing
        (F31, rule 3.11.2): then drop (recompute)."""
        if facts.reload_s_for(tier) >= facts.recompute_s:
            return Decision("recompute", f"{tier} reload not faster than recompute (F31): drop")
        return self.offload(tier, facts, reason)
