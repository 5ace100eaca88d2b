"""The pause oracle: the cheapest of hold / offload / recompute with the true wait known.

Responsibility: price one pause in one unit, **seconds**, as the sum of three terms (the
chapter's break-even prices the same three things, F29-F33):

* ``hbm_s``: HBM byte-seconds the paused state blocks, divided by the KV pool's bytes:
  pool-seconds (holding the whole KV pool idle for one second costs one second; F29 with
  mu_HBM = 1 / pool bytes, mu_DRAM = 0 as in F33's default);
* ``recompute_s``: prefill seconds to rebuild the context when the next turn needs it: the
  facts' ``recompute_s``, the run's step pricer's price of that prefill in the engine
  (calibration and the causal mask included), F30 at a sustained rate otherwise;
* ``transfer_s``: reload seconds the trajectory waits for after its tool returned (the
  exposed part of F30's reload; a perfectly timed prefetch exposes none).

``oracle_cost`` takes each action with the pause's TRUE wait and picks the cheapest, with
perfect knowledge: no action delayed, an offload's reload started exactly ``T_reload``
before the return (never before its copy-out ends), a pause that never resumes (its session
ended) dropped at once for free. Offload tiers count only when the state fitted in them when
the pause began. ``realised_cost`` prices what a run's policy actually did from the pause's
records: the HBM byte-seconds it really held (``paused_hbm_gb_s``), the recompute it really
did (the step pricer's seconds for the suffix its next turn prefilled over the prefix still
cached, pauses.parquet's ``recompute_s``), the reload stall it really exposed.

Invariant: pure arithmetic on ``PauseFacts``; every cost is finite and >= 0; the oracle's
choice is the minimum of ``action_costs`` (ties in ``ACTIONS`` order). It is a per-pause,
contention-free reference, not a proven optimum of a whole run: it ignores queueing on the
links and for HBM, and it prices a recompute of the whole context (a prefix cache may make a
policy's recompute cheaper: a policy may then cost less than the oracle).
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.policy.facts import ACTIONS, PauseFacts


@dataclass(frozen=True, slots=True)
class PauseCost:
    """One pause's cost in seconds, by term."""

    hbm_s: float = 0.0  # HBM byte-seconds / pool bytes
    recompute_s: float = 0.0
    transfer_s: float = 0.0

    @property
    def total_s(self) -> float:
        return self.hbm_s + self.recompute_s + self.transfer_s


def pool_seconds(facts: PauseFacts, byte_s: float) -> float:
    """HBM byte-seconds as pool-seconds (a pool of unknown size counts one byte as the pool)."""
    return byte_s / max(facts.pool_bytes, facts.state_bytes_total, 1.0)


def offload_cost(facts: PauseFacts, one_way_s: float, wait_s: float, resumed: bool) -> PauseCost:
    """An offload with a perfectly timed reload: the state is held during its copy-out, the
    reload starts ``one_way_s`` before the return (not before the copy-out ends) and holds
    HBM from then; a tool returning before the copy-out ends finds the state resident."""
    m = facts.state_bytes_total
    if wait_s <= one_way_s:
        return PauseCost(hbm_s=pool_seconds(facts, m * wait_s))
    if not resumed:
        return PauseCost(hbm_s=pool_seconds(facts, m * one_way_s))
    start = max(one_way_s, wait_s - one_way_s)
    held = one_way_s + (wait_s - start)
    return PauseCost(hbm_s=pool_seconds(facts, m * held), transfer_s=start + one_way_s - wait_s)


def action_costs(facts: PauseFacts, wait_s: float, resumed: bool = True) -> dict[str, PauseCost]:
    """Every action the facts allow, priced with the true wait (seconds after the pause
    starts; ``resumed``: the tool returned and its turn needs the context)."""
    if not wait_s >= 0:
        raise ValueError(f"wait_s must be >= 0, got {wait_s}")
    out = {
        "hold": PauseCost(hbm_s=pool_seconds(facts, facts.hold_byte_s(wait_s))),
        "recompute": PauseCost(recompute_s=facts.recompute_s if resumed else 0.0),
    }
    if facts.host_fits():
        out["offload_host"] = offload_cost(facts, facts.reload_s, wait_s, resumed)
    if facts.nvme_fits():
        out["offload_nvme"] = offload_cost(facts, facts.nvme_reload_s, wait_s, resumed)
    return out


def oracle_cost(facts: PauseFacts, wait_s: float, resumed: bool = True) -> tuple[str, PauseCost]:
    """The cheapest action for this pause with its true wait known, and its cost."""
    costs = action_costs(facts, wait_s, resumed)
    best = min(costs, key=lambda a: (costs[a].total_s, ACTIONS.index(a)))
    return best, costs[best]


def realised_cost(
    facts: PauseFacts,
    held_byte_s: float,
    recompute_flops: float,
    reload_stall_s: float,
    recompute_s: float | None = None,
) -> PauseCost:
    """What a pause cost as it happened: the HBM byte-seconds its state held, its next
    turn's recompute (``recompute_s``, the step pricer's seconds for it; None: its
    ``recompute_flops`` at the facts' prefill rate, F30) and the reload stall it exposed."""
    if recompute_s is None:
        recompute_s = max(0.0, recompute_flops) / facts.prefill_flops_per_s
    return PauseCost(
        hbm_s=pool_seconds(facts, max(0.0, held_byte_s)),
        recompute_s=max(0.0, recompute_s),
        transfer_s=max(0.0, reload_stall_s),
    )
