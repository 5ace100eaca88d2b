"""Profile schemas: accelerators, models and nodes as frozen, validated specs.

Invariant: a profile object is immutable and internally consistent once built (every
size in bytes, every rate in bytes/s or FLOP/s, head counts that divide as attention
requires); nothing else in kvsim re-validates profile fields.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from pydantic import ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from sim.config_model import ConfigModel
from sim.profiles.bounds import MAX_ALLREDUCE_LATENCY_S, MAX_BW_BYTES_PER_S, MAX_FLOPS_PER_S
from sim.profiles.layer_groups import (
    AttentionGroup,
    DType,
    LayerGroup,
    MLAGroup,
    check_groups,
    expand_pattern,
)
from sim.units import dtype_bytes


class _Spec(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class HostLink(_Spec):
    """The accelerator's link to host memory (one direction's bandwidth)."""

    kind: Literal["pcie", "nvlink-c2c", "infinity-fabric"]
    gen: int | None = Field(None, ge=1)  # PCIe generation
    lanes: int | None = Field(None, ge=1)
    bw_bytes_per_s_per_direction: float = Field(gt=0, le=MAX_BW_BYTES_PER_S)  # theoretical, one direction
    effective_bw_bytes_per_s_per_direction: float | None = Field(None, gt=0, le=MAX_BW_BYTES_PER_S)  # sustained DMA, if known

    @property
    def usable_bw_bytes_per_s(self) -> float:
        """Effective bandwidth when known, else the theoretical figure."""
        return self.effective_bw_bytes_per_s_per_direction or self.bw_bytes_per_s_per_direction


class AllReduceLine(_Spec):
    """One TP degree's measured all-reduce: ``latency_s + 2 (p-1)/p x bytes / bus_bw``."""

    latency_s: float = Field(ge=0, le=MAX_ALLREDUCE_LATENCY_S)  # seconds per call
    bus_bw_bytes_per_s: float = Field(gt=0, le=MAX_BW_BYTES_PER_S)  # NCCL bus bandwidth


class AllReduceProfile(_Spec):
    """Measured NCCL all-reduce inside one node of this accelerator (per TP degree)."""

    source: str = Field(min_length=1)  # where the figures come from
    by_tp: dict[int, AllReduceLine] = Field(min_length=1)  # TP degree (>= 2) -> fit

    @model_validator(mode="after")
    def _degrees(self) -> AllReduceProfile:
        if any(tp < 2 for tp in self.by_tp):
            raise ValueError("by_tp keys are TP degrees >= 2")
        return self


class AcceleratorProfile(_Spec):
    """One accelerator (GPU) as its datasheet states it."""

    name: str
    kind: Literal["accelerator"] = "accelerator"
    vendor: str
    memory_bytes: PositiveInt
    memory_vendor_figure: str  # the label as the vendor prints it, e.g. "80GB HBM3"
    memory_vendor_unit: Literal["GB", "GiB"]  # what the vendor's figure really counts
    hbm_bw_bytes_per_s: float = Field(gt=0, le=MAX_BW_BYTES_PER_S)
    peak_bf16_flops_per_s: float = Field(gt=0, le=MAX_FLOPS_PER_S)  # dense (no sparsity)
    peak_fp8_flops_per_s: float | None = Field(None, gt=0, le=MAX_FLOPS_PER_S)  # dense; None when unsupported
    # dense FP4 (NVFP4) tensor throughput; None when the chip has no FP4 (before Blackwell):
    # an nvfp4 KV cache on such a chip is warned about (``fp4_kv_warning``)
    peak_fp4_flops_per_s: float | None = Field(None, gt=0, le=MAX_FLOPS_PER_S)
    host_link: HostLink
    # measured TP all-reduce in this accelerator's 8-GPU box (None: not measured)
    allreduce: AllReduceProfile | None = None
    # an example price for cost figures (summary.json usd_*): documented examples, not
    # quotes; a scenario's ``pricing:`` section overrides it (None: no cost figures)
    usd_per_gpu_hour: PositiveFloat | None = None
    price_source: str = ""  # where the example figure comes from
    price_date: str = ""  # when it was seen (YYYY-MM)
    notes: str = ""

    def peak_flops_per_s(self, dtype: str = "bf16") -> float:
        """Dense peak for a compute dtype; fp8 falls back to bf16 where unsupported."""
        if dtype == "fp8" and self.peak_fp8_flops_per_s:
            return self.peak_fp8_flops_per_s
        return self.peak_bf16_flops_per_s

    def fp4_kv_warning(self, kv_dtypes: Iterable[str | None]) -> str:
        """The one-line caveat of an nvfp4 KV cache on a chip without FP4, or "": NVFP4 KV
        is a Blackwell format (vLLM and TensorRT-LLM serve it only there); kvsim still
        sizes it at 4.5 bits, so the figures are of a deployment that would not start."""
        if "nvfp4" not in set(kv_dtypes) or self.peak_fp4_flops_per_s is not None:
            return ""
        return (
            f"kv_dtype nvfp4 on {self.name}: this accelerator has no FP4 (its profile gives no "
            "peak_fp4_flops_per_s; NVFP4 KV needs Blackwell, e.g. b200-192gb); the KV is "
            "still sized at 4.5 bits per element, a deployment that vLLM would not start"
        )


class MLASpec(_Spec):
    """Multi-head latent attention: one latent of kv_lora_rank + qk_rope_head_dim per layer."""

    kv_lora_rank: PositiveInt
    qk_rope_head_dim: PositiveInt


class SlidingWindowSpec(_Spec):
    """Sliding-window layers: ``pattern`` repeats over the layers from layer 0."""

    window_tokens: PositiveInt
    pattern: list[Literal["sliding", "full"]] = Field(min_length=1)


#: the most layers a model may have: a per-layer list of a billion would exhaust memory
MAX_LAYERS = 10_000


class ModelProfile(_Spec):
    """A transformer's geometry, as far as KV memory and compute cost need it."""

    name: str
    kind: Literal["model"] = "model"
    family: str = ""
    attention: Literal["mha", "gqa", "mla"]
    # bounded: per-layer lists are built from it (the largest model shipped has 126 layers)
    num_layers: int = Field(gt=0, le=MAX_LAYERS)
    num_q_heads: PositiveInt
    num_kv_heads: PositiveInt  # for MLA: 1 (the latent is shared by all heads)
    head_dim: PositiveInt
    d_model: PositiveInt
    params_total: PositiveFloat
    params_active: PositiveFloat | None = None  # MoE: parameters used per token
    mla: MLASpec | None = None
    sliding_window: SlidingWindowSpec | None = None
    kv_dtype: DType = "bf16"
    weight_dtype: DType = "bf16"
    #: bits per parameter of the routed experts' weights when the checkpoint stores them in
    #: a block-scaled format of its own (``quantization_config`` in config.json): MXFP4 is
    #: 4-bit values plus one 8-bit scale per 32, 4 + 8 / 32 = 4.25 bits (gpt-oss); the
    #: other parameters stay at ``weight_dtype``. None: every parameter at ``weight_dtype``
    expert_weight_bits: PositiveFloat | None = Field(None, le=64)
    max_context_tokens: PositiveInt | None = None
    # dense MLP width and vocabulary: with both, per-group pricing knows every GEMM shape
    # and prices the embedding and LM head once per step (None: not stated)
    intermediate_size: PositiveInt | None = None
    vocab_size: PositiveInt | None = None
    gated_mlp: bool = True  # SwiGLU-style: up and gate projections (2 x intermediate_size)
    # mixture of experts (None: dense): routed experts per layer and experts each token uses
    num_experts: PositiveInt | None = None
    experts_per_token: PositiveInt | None = None
    moe_intermediate_size: PositiveInt | None = None  # one expert's MLP width
    # leading layers with a dense MLP instead of experts (DeepSeek's first_k_dense_replace)
    first_dense_layers: int = Field(0, ge=0)
    # layer groups (sim.profiles.layer_groups): hybrid models' KV shapes, one spec per group,
    # and which group each layer belongs to (group names repeated from layer 0; 'none' for
    # a block with no cache). None: derived from the fields above (mla, sliding_window)
    layer_groups: list[LayerGroup] | None = Field(None, min_length=1)
    layer_pattern: list[str] | None = Field(None, min_length=1)
    notes: str = ""

    @model_validator(mode="after")
    def _consistent(self) -> ModelProfile:
        if (self.attention == "mla") != (self.mla is not None):
            raise ValueError("attention 'mla' requires an 'mla' block, and only it may have one")
        if self.attention == "mha" and self.num_kv_heads != self.num_q_heads:
            raise ValueError("attention 'mha' needs num_kv_heads == num_q_heads")
        if self.attention != "mla" and self.num_q_heads % self.num_kv_heads:
            raise ValueError("num_q_heads must be a multiple of num_kv_heads")
        if self.params_active is not None and self.params_active > self.params_total:
            raise ValueError("params_active cannot exceed params_total")
        if (self.num_experts is None) != (self.experts_per_token is None):
            raise ValueError("num_experts and experts_per_token go together (MoE), or neither")
        if self.num_experts is not None and self.experts_per_token > self.num_experts:
            raise ValueError("experts_per_token cannot exceed num_experts")
        if self.expert_weight_bits is not None and self.num_experts is None:
            raise ValueError("expert_weight_bits needs routed experts (num_experts)")
        if self.first_dense_layers >= self.num_layers:
            raise ValueError("first_dense_layers must leave at least one MoE layer")
        self._check_layer_groups()
        self._check_windows()
        return self

    def _check_windows(self) -> None:
        """A sliding window or local chunk longer than the model's context window is no
        window at all (every token stays in it): refused, naming the field, rather than
        sized as a window that never slides."""
        if self.max_context_tokens is None:
            return
        windows: list[tuple[str, int]] = []
        if self.sliding_window is not None:
            windows.append(("sliding_window.window_tokens", self.sliding_window.window_tokens))
        for i, g in enumerate(self.layer_groups or []):
            w = getattr(g, "window_tokens", None)
            if w is not None:
                windows.append((f"layer_groups[{i}].window_tokens", w))
        for field, w in windows:
            if w > self.max_context_tokens:
                raise ValueError(
                    f"{field} {w:,} exceeds max_context_tokens {self.max_context_tokens:,}: "
                    "a window longer than the context never slides (give those layers as "
                    "full attention, or raise max_context_tokens)"
                )

    def _check_layer_groups(self) -> None:
        if self.layer_groups is None:
            if self.layer_pattern is not None:
                raise ValueError("layer_pattern needs layer_groups")
            return
        if self.sliding_window is not None:
            raise ValueError(
                "give sliding layers either as sliding_window or as a layer group, not both"
            )
        check_groups(self.layer_groups, self.layer_pattern, self.num_layers)
        for g in self.layer_groups:  # one latent shape, stated twice, must agree
            if g.kind == "mla" and (self.mla is None or g.kv_lora_rank != self.mla.kv_lora_rank
                                    or g.qk_rope_head_dim != self.mla.qk_rope_head_dim):  # fmt: skip
                raise ValueError(f"layer group {g.name!r} must match the model's 'mla' block")

    @property
    def active_params(self) -> float:
        """Parameters multiplied per token (MoE: the active experts only)."""
        return self.params_active or self.params_total

    @property
    def weights_bytes(self) -> float:
        """The checkpoint's weight bytes (F34's ``N_params x b_weight``): every parameter at
        ``weight_dtype``, except the routed experts (``routed_expert_params``) at
        ``expert_weight_bits / 8`` when stated: gpt-oss-120b 114.66e9 expert parameters x
        4.25 / 8 + 2.14e9 others x 2 B = 65.19e9 B (docs/sizing.md)."""
        per_param = dtype_bytes(self.weight_dtype)
        if self.expert_weight_bits is None:
            return self.params_total * per_param
        experts = min(self.routed_expert_params, self.params_total)
        return (self.params_total - experts) * per_param + experts * self.expert_weight_bits / 8

    @property
    def moe_layers(self) -> int:
        """Layers with routed experts (0: a dense model)."""
        return self.num_layers - self.first_dense_layers if self.num_experts else 0

    @property
    def routed_expert_params(self) -> float:
        """Parameters of the routed experts of every MoE layer (0: dense): moe_layers x E x
        (2 or 3) x d_model x moe_intermediate_size, else estimated from the totals as
        (total - active) x E / (E - k) (the inactive share of the experts is (E - k) / E)."""
        E, k = self.num_experts, self.experts_per_token
        if not E:
            return 0.0
        if self.moe_intermediate_size:
            mats = 3 if self.gated_mlp else 2
            return float(self.moe_layers * E * mats * self.d_model * self.moe_intermediate_size)
        if E == k or self.params_active is None:
            return 0.0
        return (self.params_total - self.params_active) * E / (E - k)

    def kv_groups(self) -> tuple[LayerGroup, ...]:
        """The layer groups: as stated, or derived from ``mla`` / ``sliding_window``.

        A profile without ``layer_groups`` maps to one group (``full`` or ``mla``) or two
        (``full`` and ``sliding``), so its sizes are the same as before groups existed.
        """
        if self.layer_groups is not None:
            return tuple(self.layer_groups)
        if self.mla is not None:
            return (MLAGroup(name="mla", kind="mla", **self.mla.model_dump()),)
        heads = dict(num_kv_heads=self.num_kv_heads, head_dim=self.head_dim)
        full = AttentionGroup(name="full", kind="full", **heads)
        if self.sliding_window is None:
            return (full,)
        sliding = AttentionGroup(
            name="sliding",
            kind="sliding_window",
            window_tokens=self.sliding_window.window_tokens,
            **heads,
        )
        used = set(self.sliding_window.pattern)
        return tuple(g for g in (full, sliding) if g.name in used)

    def layer_group_names(self) -> list[tuple[str, ...]]:
        """For every layer, in order, the groups it caches in (none, one, or with indexers)."""
        groups = self.kv_groups()
        if self.layer_groups is not None:
            layered = [g.name for g in groups if g.kind != "indexer"]
            pattern = self.layer_pattern or layered
        else:
            pattern = [groups[0].name] if self.sliding_window is None else self.sliding_window.pattern
        companions: dict[str, list[str]] = {}
        for g in groups:
            if g.kind == "indexer":
                companions.setdefault(g.alongside, []).append(g.name)
        return [
            () if name == "none" else (name, *companions.get(name, ()))
            for name in expand_pattern(list(pattern), self.num_layers)
        ]

    def layer_kinds(self) -> list[str]:
        """'full' or 'sliding' for every layer, in order, from ``sliding_window`` only (the
        layer groups of a hybrid profile: ``layer_group_names``)."""
        if self.sliding_window is None:
            return ["full"] * self.num_layers
        pat = self.sliding_window.pattern
        return [pat[i % len(pat)] for i in range(self.num_layers)]


class NodeProfile(_Spec):
    """A server: accelerators plus the host tiers KV can be moved to."""

    name: str
    kind: Literal["node"] = "node"
    accelerator: str  # an accelerator profile name
    num_gpus: PositiveInt
    host_dram_bytes: PositiveInt
    pinned_host_fraction: float = Field(0.5, gt=0, le=1)  # share of DRAM usable as pinned KV pool
    nvme_drives: int = Field(0, ge=0)
    nvme_bw_bytes_per_s_per_drive: float | None = Field(None, gt=0, le=MAX_BW_BYTES_PER_S)
    nvme_capacity_bytes_per_drive: PositiveInt | None = None
    gpu_interconnect: str = ""
    notes: str = ""

    @property
    def pinned_host_bytes(self) -> float:
        """Host DRAM usable as the pinned KV pool: ``host_dram_bytes x pinned_host_fraction``."""
        return self.host_dram_bytes * self.pinned_host_fraction

    @property
    def nvme_tier(self) -> tuple[float, float]:
        """(bytes, bandwidth over all drives in B/s) of the NVMe tier; (0.0, 0.0) without
        drives or their capacity (bandwidth 0.0 when the drives state none)."""
        if not (self.nvme_drives and self.nvme_capacity_bytes_per_drive):
            return 0.0, 0.0
        nvme = float(self.nvme_drives * self.nvme_capacity_bytes_per_drive)
        return nvme, self.nvme_drives * (self.nvme_bw_bytes_per_s_per_drive or 0.0)

    def mismatch(self, accelerator: str, num_gpus: int) -> list[str]:
        """What a configuration naming this node as its host says against it, one sentence
        each (none when it fits): another accelerator than the node's, or more GPUs than
        it holds. Only the node's tiers (host DRAM, NVMe) are read from it, so the run
        goes on with the configuration's GPUs: the sentences are warnings."""
        out = []
        if accelerator != self.accelerator:
            out.append(f"node {self.name} holds {self.accelerator} GPUs, not {accelerator}: "
                       f"its host DRAM and NVMe tiers serve {num_gpus} x {accelerator} here; "
                       "name the node of your GPUs (kvsim profiles list --kind node)")  # fmt: skip
        if num_gpus > self.num_gpus:
            out.append(f"node {self.name} holds {self.num_gpus} GPUs, fewer than the "
                       f"{num_gpus} (tp x pp) that share its host DRAM and NVMe tiers here")  # fmt: skip
        return out


PROFILE_CLASSES: dict[str, type[_Spec]] = {
    "accelerator": AcceleratorProfile,
    "model": ModelProfile,
    "node": NodeProfile,
}
