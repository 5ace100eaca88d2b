"""``kvsim breakeven``'s engine side: what the engine would decide, and count, for one pause.

Responsibility: ask the engine's own functions about the pause ``sim.sizing.breakeven``
prices, with no formula of this module's:

- the decision: the ``break_even`` policy's ``decide`` (``sim.policy.break_even``) on
  ``PauseFacts`` built from the command's figures: the wait, the state's bytes per GPU
  (what each rank moves) and over the replica (what it holds and parks), the per-GPU
  link, the prefill rate, the recompute FLOPs the command prints (F30, with F23's
  attention term under ``--attention``), so the recompute time the policy weighs is the
  command's; host DRAM and NVMe from a node profile (``NodeProfile.pinned_host_bytes``,
  ``nvme_tier``, as a run's tiers); without one, host DRAM is assumed to have room and
  there is no NVMe tier. The policy's options are its defaults but the horizon and the
  command's mu_HBM / mu_DRAM and stall. It answers hold, offload_host, offload_nvme or
  recompute;
- the engine's count of the recompute: ``CostModel.prefill_alone`` (what a run records
  as a pause's ``recompute_flops``) under ``step_pricing: per_group`` (the layer GEMMs from
  the model's shapes, the LM head on each chunk's last token, attention under the
  command's mask), in the chunks the default ``vllm_v1`` scheduler cuts a lone prefill
  into (``lone_prefill_chunks``). ``roofline_max`` (a run's default without a
  version-2 calibration) counts F23's ``2 P S`` plus the same attention instead.

Invariant: pure; the same inputs give the same answers as the engine's functions.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from sim.cost import CostConfig, CostModel
from sim.policy.break_even import BreakEven
from sim.policy.facts import Decision, PauseFacts
from sim.profiles.schema import AcceleratorProfile, NodeProfile
from sim.sched.vllm_v1 import VllmV1Config, lone_prefill_chunks
from sim.sizing.breakeven import BREAKEVEN_MASKS, BreakEvenInputs, BreakEvenResult

#: the step pricing whose FLOP count ``kvsim breakeven`` reports as the engine's
ENGINE_COUNT_PRICING = "per_group"
#: the longest context the engine's count is priced for (8,192 steps of the default
#: budget, well under a second); beyond it (up to ``--context``'s 1e12) it is not given
ENGINE_COUNT_MAX_TOKENS = 2**26


@dataclass(frozen=True)
class ParkingTiers:
    """Where a paused state may go besides HBM: free host DRAM and NVMe bytes, the drives'
    bandwidth (all of them, B/s; 0: no NVMe tier)."""

    host_free_bytes: float = math.inf  # no node profile: assumed to have room
    nvme_free_bytes: float = 0.0
    nvme_bw_bytes_per_s: float = 0.0

    @classmethod
    def of_node(cls, node: NodeProfile | None) -> ParkingTiers:
        """A node profile's pinned host pool and NVMe tier, empty as a run starts them;
        ``None``: host DRAM with room, no NVMe."""
        if node is None:
            return cls()
        nvme, nvme_bw = node.nvme_tier
        if nvme_bw <= 0:  # drives without a bandwidth: no usable tier
            nvme = 0.0
        return cls(node.pinned_host_bytes, nvme, nvme_bw)


def policy_options(inp: BreakEvenInputs, horizon_s: float | None = None) -> BreakEven.Options:
    """The ``break_even`` policy's options for the command's flags: its defaults, the
    horizon when given, mu_HBM / mu_DRAM = ``--mu-ratio`` (mu_DRAM 0 when infinite, the
    policy's default) and ``--stall-s``."""
    opts: dict[str, float] = {"stall_s": inp.stall_s}
    if horizon_s is not None:
        opts["horizon_s"] = horizon_s
    if not math.isinf(inp.mu_ratio):
        opts["mu_hbm"], opts["mu_dram"] = inp.mu_ratio, 1.0  # the policy's ratio, exactly
    return BreakEven.Options.model_validate(opts)


def pause_facts(result: BreakEvenResult, tiers: ParkingTiers) -> PauseFacts:
    """The facts the engine would hand the policy for this pause (its wait known)."""
    return PauseFacts(
        tokens=result.context_tokens,
        state_bytes_per_gpu=result.kv_bytes_per_gpu,
        state_bytes_total=result.kv_bytes_all_gpus,
        predicted_wait_s=result.wait_s,
        hbm_free_fraction=0.0,
        link_bw_bytes_per_s=result.link_bw_bytes_per_s,
        prefill_flops_per_s=result.prefill_flops_per_s,
        recompute_flops=result.recompute_flops,
        host_free_bytes=tiers.host_free_bytes,
        nvme_free_bytes=tiers.nvme_free_bytes,
        nvme_bw_bytes_per_s=tiers.nvme_bw_bytes_per_s,
    )


def policy_decision(
    inp: BreakEvenInputs,
    result: BreakEvenResult,
    tiers: ParkingTiers | None = None,
    horizon_s: float | None = None,
) -> Decision | None:
    """The engine's ``break_even`` decision at the command's wait (None without one);
    ``tiers`` None: host DRAM with room, no NVMe."""
    if result.wait_s is None:
        return None
    facts = pause_facts(result, tiers or ParkingTiers())
    return BreakEven(policy_options(inp, horizon_s)).decide(facts)


@dataclass(frozen=True)
class EngineCount:
    """FLOPs over the replica the engine's step pricer counts for the recompute."""

    flops: float
    chunks: tuple[int, ...]  # the lone prefill's chunks (new tokens each)
    pricing: str = ENGINE_COUNT_PRICING


def engine_recompute_count(inp: BreakEvenInputs, accelerator: AcceleratorProfile) -> EngineCount:
    """``CostModel.prefill_alone``'s FLOPs for the whole context, from no cache, under
    ``per_group`` pricing and the command's attention mask (``--params`` overrides the
    parameters as ``cost.params`` does: one group of the whole model, ``2 P`` per token)."""
    config = CostConfig.model_validate(
        {"step_pricing": ENGINE_COUNT_PRICING, "attention_mask": BREAKEVEN_MASKS[inp.attention_mask],
         "params": inp.params}
    )  # fmt: skip
    cost = CostModel(inp.model, accelerator, inp.tp, inp.pp, config)
    chunks = tuple(lone_prefill_chunks(VllmV1Config.model_validate({}), inp.context_tokens))
    return EngineCount(cost.prefill_alone(chunks)[1], chunks)


@dataclass(frozen=True)
class EngineView:
    """``kvsim breakeven``'s additive JSON keys: the engine's decision and count."""

    policy_decision: str | None  # break_even's action at --wait (None without it)
    policy_reason: str | None  # its reason, as a run's pause row records it
    horizon_s: float  # the policy's horizon_s it decided with
    host_free_bytes: float | None  # pinned host DRAM from --node; None: assumed room
    nvme_free_bytes: float  # NVMe bytes from --node (0: no NVMe tier)
    nvme_bw_bytes_per_s: float  # all drives together (0: no NVMe tier)
    nvme_reload_s: float | None  # one way, drives then link (None: no NVMe tier)
    engine_recompute_flops: float | None  # the engine's count (None: see the note)
    engine_recompute_pricing: str  # the step pricing that count is (per_group)
    engine_recompute_chunks: list[int] | None  # the lone prefill's chunks it prices
    engine_minus_f30_flops: float | None  # engine count - recompute_flops
    engine_over_f30: float | None  # engine count / recompute_flops
    engine_recompute_note: str | None  # why there is no count (None: there is one)

    def to_dict(self) -> dict:
        return asdict(self)


def engine_view(
    inp: BreakEvenInputs,
    result: BreakEvenResult,
    accelerator: AcceleratorProfile | None,
    node: NodeProfile | None = None,
    horizon_s: float | None = None,
) -> EngineView:
    """The decision and the count for the command's pause (no count without an
    accelerator profile: the engine's pricer needs one, though FLOPs do not depend on it;
    nor past ``ENGINE_COUNT_MAX_TOKENS``: one step per chunk is priced)."""
    tiers = ParkingTiers.of_node(node)
    decision = policy_decision(inp, result, tiers, horizon_s)
    note = None
    if accelerator is None:
        note = "give --gpu or --node: the engine's step pricer needs an accelerator profile"
    elif inp.context_tokens > ENGINE_COUNT_MAX_TOKENS:
        note = f"not priced past {ENGINE_COUNT_MAX_TOKENS:,} tokens (one step per chunk)"
    count = engine_recompute_count(inp, accelerator) if accelerator and note is None else None
    facts = pause_facts(result, tiers)
    f30 = result.recompute_flops
    return EngineView(
        policy_decision=None if decision is None else decision.action,
        policy_reason=None if decision is None else decision.reason,
        horizon_s=policy_options(inp, horizon_s).horizon_s,
        host_free_bytes=None if math.isinf(tiers.host_free_bytes) else tiers.host_free_bytes,
        nvme_free_bytes=tiers.nvme_free_bytes,
        nvme_bw_bytes_per_s=tiers.nvme_bw_bytes_per_s,
        nvme_reload_s=facts.nvme_reload_s if facts.has_nvme else None,
        engine_recompute_flops=None if count is None else count.flops,
        engine_recompute_pricing=ENGINE_COUNT_PRICING,
        engine_recompute_chunks=None if count is None else list(count.chunks),
        engine_minus_f30_flops=None if count is None else count.flops - f30,
        engine_over_f30=None if count is None else count.flops / f30,
        engine_recompute_note=note,
    )
