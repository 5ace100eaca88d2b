"""What a pause policy sees and what it answers: ``PauseFacts`` in, ``Decision`` out.

Responsibility: the two value objects of the policy layer and the transfer/recompute times
derived from the facts (F30, F32, and their NVMe counterparts), computed once here with the
``sim.sizing`` formulas so every policy prices a pause the same way. A recompute's seconds
are the engine's step-pricer price when the facts carry one (``recompute_priced_s``: the
engine always gives it, so calibration and the causal mask apply), else F30's
``recompute_flops / prefill_flops_per_s``.

Invariant: both objects are immutable and validated on construction (no negative bytes or
rates, a free fraction in [0, 1], an action from ``ACTIONS``); times are seconds, sizes
bytes, memory-time byte-seconds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from sim.policy.hint import KVHint
from sim.profiles.schema import ModelProfile
from sim.sizing import (
    kv_bytes_for_context,
    model_prefill_flops,
    offload_round_trip_s,
    reload_time_s,
)

Action = Literal["hold", "recompute", "offload_host", "offload_nvme"]
#: every action a policy may answer, in order of where the state ends up: HBM, nowhere,
#: host DRAM, NVMe
ACTIONS: tuple[str, ...] = ("hold", "recompute", "offload_host", "offload_nvme")
OFFLOAD_ACTIONS: tuple[str, ...] = ("offload_host", "offload_nvme")

ResumeStrategy = Literal["naive", "speculative", "pipelined"]
RESUME_STRATEGIES: tuple[str, ...] = ("naive", "speculative", "pipelined")


@dataclass(frozen=True, slots=True)
class PauseFacts:
    """What the engine knows about one trajectory when its tool call starts."""

    tokens: int  # context tokens whose KV is paused
    state_bytes_per_gpu: float  # KV one TP rank holds (MLA: the whole latent) = bytes it moves
    # KV over the replica's GPUs, every rank's copy (an MLA latent or a replicated KV head
    # once per rank) = HBM it holds (F29) = bytes host DRAM or NVMe store (each rank
    # offloads its own pages, as vLLM's OffloadingConnector; docs/pause_policies.md)
    state_bytes_total: float
    predicted_wait_s: float | None  # the predictor's guess; None = tool unknown, no prior
    hbm_free_fraction: float  # memory pressure: free share of the HBM KV pool, in [0, 1]
    link_bw_bytes_per_s: float  # per GPU, one direction (all GPUs move their share at once)
    prefill_flops_per_s: float  # sustained prefill rate of the replica (MFU included)
    recompute_flops: float  # FLOPs to rebuild the state by prefill (F23/F30)
    host_free_bytes: float = 0.0  # free pinned host-DRAM frames, in bytes
    nvme_free_bytes: float = 0.0  # free NVMe frames, in bytes
    nvme_bw_bytes_per_s: float = 0.0  # all drives together; 0 = no NVMe tier
    nvme_gds: bool = False  # GPUDirect Storage: GPU <-> NVMe without staging in host DRAM
    tool_name: str = ""
    is_last_turn: bool = False  # no turn follows this pause: nothing will reuse the KV
    tool_min_wait_s: float | None = None  # shortest wait seen for this tool (prefetch timer)
    # KV of the other running requests (InferCept waste); the engine fills it in only for
    # a policy that ``reads_running_batch`` (0.0 for the others)
    running_batch_bytes: float = 0.0
    swap_budget_bytes_per_gpu: float = math.inf  # link bytes per GPU still hideable this step
    hint: KVHint | None = None  # what the agent harness said about this pause (``hints``)
    pool_bytes: float = 0.0  # the HBM KV pool over the replica (prices held bytes; 0 = unknown)
    # seconds the run's step pricer charges to rebuild the state by prefill (the engine's
    # CostModel, in the scheduler's chunks); None: F30 at the sustained rate
    recompute_priced_s: float | None = None

    def __post_init__(self) -> None:
        if self.tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {self.tokens}")
        for name in (
            "state_bytes_per_gpu",
            "state_bytes_total",
            "recompute_flops",
            "host_free_bytes",
            "nvme_free_bytes",
            "nvme_bw_bytes_per_s",
            "running_batch_bytes",
            "swap_budget_bytes_per_gpu",
            "pool_bytes",
        ):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        for name in ("link_bw_bytes_per_s", "prefill_flops_per_s"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if not 0.0 <= self.hbm_free_fraction <= 1.0:
            raise ValueError(f"hbm_free_fraction must be in [0, 1], got {self.hbm_free_fraction}")
        for name in ("predicted_wait_s", "tool_min_wait_s"):
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0 or None, got {value}")
        priced = self.recompute_priced_s
        if priced is not None and not 0 <= priced < math.inf:
            raise ValueError(f"recompute_priced_s must be finite and >= 0 or None, got {priced}")

    # ------------------------------------------------------------------ derived times
    @property
    def reload_s(self) -> float:
        """F30: one-way host link transfer, every GPU moving its share at once."""
        return reload_time_s(self.state_bytes_per_gpu, self.link_bw_bytes_per_s)

    @property
    def round_trip_s(self) -> float:
        """F32: copy-out plus copy-in over the host link."""
        return offload_round_trip_s(self.state_bytes_per_gpu, self.link_bw_bytes_per_s)

    @property
    def recompute_s(self) -> float:
        """Prefill time to rebuild the state: the step pricer's price when given, else
        F30's ``recompute_flops / prefill_flops_per_s``."""
        if self.recompute_priced_s is not None:
            return self.recompute_priced_s
        return self.recompute_flops / self.prefill_flops_per_s

    @property
    def has_nvme(self) -> bool:
        return self.nvme_bw_bytes_per_s > 0

    @property
    def nvme_reload_s(self) -> float:
        """One-way NVMe <-> HBM time, the same rule as the copy engines.

        Through host memory (default) the two legs run one after the other: the drives move
        the replica's bytes, then each GPU its share over its link. With GPUDirect Storage
        both resources are busy at once and the slower one sets the time.
        """
        if not self.has_nvme:
            return math.inf
        drives_s = self.state_bytes_total / self.nvme_bw_bytes_per_s
        if self.nvme_gds:
            return max(drives_s, self.reload_s)
        return drives_s + self.reload_s

    @property
    def nvme_round_trip_s(self) -> float:
        return 2 * self.nvme_reload_s

    def hold_byte_s(self, wait_s: float) -> float:
        """F29 for this state over ``wait_s`` (every GPU of the replica, byte-seconds)."""
        return self.state_bytes_total * wait_s

    def host_fits(self, reserve_bytes: float = 0.0) -> bool:
        return self.host_free_bytes - reserve_bytes >= self.state_bytes_total

    def nvme_fits(self) -> bool:
        return self.has_nvme and self.nvme_free_bytes >= self.state_bytes_total

    def reload_s_for(self, action: str) -> float:
        """Seconds to bring the state back after ``action`` (0 for hold)."""
        return {
            "hold": 0.0,
            "recompute": self.recompute_s,
            "offload_host": self.reload_s,
            "offload_nvme": self.nvme_reload_s,
        }[action]


@dataclass(frozen=True, slots=True)
class PrefetchPlan:
    """How offloaded state comes back (rule 3.13)."""

    strategy: ResumeStrategy  # naive | speculative | pipelined
    fire_after_s: float | None = None  # speculative: timer, seconds after the pause starts

    def __post_init__(self) -> None:
        if self.strategy not in RESUME_STRATEGIES:
            raise ValueError(f"unknown resume strategy {self.strategy!r}")
        if (self.strategy == "speculative") != (self.fire_after_s is not None):
            raise ValueError("a fire time is given exactly for the speculative strategy")
        if self.fire_after_s is not None and not self.fire_after_s >= 0:
            raise ValueError(f"fire_after_s must be >= 0, got {self.fire_after_s}")

    @property
    def pipelined(self) -> bool:
        return self.strategy == "pipelined"


@dataclass(frozen=True, slots=True)
class Decision:
    """A policy's answer for one pause."""

    action: Action
    reason: str = ""  # one short phrase, recorded with the pause
    prefetch: PrefetchPlan | None = None  # offloads (or a TTL released to one): how it returns
    ttl_s: float | None = None  # hold only: stay resident this long, then apply ``release``
    release: Action | None = None  # the action taken when the TTL expires
    evict_from_prefix_cache: bool = False  # recompute only: drop the blocks from the cache too
    hint_refused: str = ""  # ``hints``: the part of the pause's hint not honoured, and why

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"unknown action {self.action!r}; valid: {', '.join(ACTIONS)}")
        if self.prefetch is not None and self.moves_to not in OFFLOAD_ACTIONS:
            raise ValueError("a prefetch plan belongs to an offload action (or TTL release)")
        if (self.ttl_s is None) != (self.release is None):
            raise ValueError("ttl_s and release go together")
        if self.ttl_s is not None:
            if self.action != "hold" or not self.ttl_s >= 0:
                raise ValueError("a TTL is a non-negative hold time")
            if self.release not in ACTIONS or self.release == "hold":
                raise ValueError(f"release must be a non-hold action, got {self.release!r}")
        if self.evict_from_prefix_cache and self.action != "recompute":
            raise ValueError("evict_from_prefix_cache applies to recompute only")

    @property
    def moves_to(self) -> str:
        """Where the state ends up: the action, or the release of a TTL hold."""
        return self.release if self.release is not None else self.action


def facts_for_context(
    model: ModelProfile,
    tokens: int,
    *,
    link_bw_bytes_per_s: float,
    prefill_flops_per_s: float,
    predicted_wait_s: float | None,
    tp: int = 1,
    params: float | None = None,
    attention: bool = False,
    hbm_free_fraction: float = 0.0,
    **rest,
) -> PauseFacts:
    """Facts for one trajectory of ``tokens`` context on ``model`` (sizes from F1-F2, F23).

    The state's total is one rank's bytes times ``tp``, as the engine counts it (an MLA
    latent or a replicated KV head is held, and offloaded, by every rank). ``attention``
    adds F23's attention term to the recompute FLOPs (the chapter's F30 drops it);
    ``rest`` are the remaining ``PauseFacts`` fields.
    """
    per_gpu = kv_bytes_for_context(model, tokens, tp, per_gpu=True)
    return PauseFacts(
        tokens=tokens,
        state_bytes_per_gpu=per_gpu,
        state_bytes_total=per_gpu * tp,
        predicted_wait_s=predicted_wait_s,
        hbm_free_fraction=hbm_free_fraction,
        link_bw_bytes_per_s=link_bw_bytes_per_s,
        prefill_flops_per_s=prefill_flops_per_s,
        recompute_flops=model_prefill_flops(model, tokens, params or model.active_params, attention),
        **rest,
    )
