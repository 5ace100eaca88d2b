"""Resolving a validated scenario into the numbers a run needs (profiles, the KV pool).

Responsibility: load the model and accelerator profiles, apply TP/PP (F1 per GPU), size
the KV pool (F34: ``memory x gpu_memory_utilization - weights - reserve`` per GPU, or the
explicit ``kv_pool_bytes_per_gpu``), fill derived allocator defaults, and check that the
allocator can be built. Errors point at the scenario line of the field that caused them.

Invariant: memory figures of a run are for the whole engine instance (all ``tp x pp``
GPUs): ``pool_bytes = pool per GPU x GPUs`` and ``kv_bytes_per_token = KV per token per GPU
x GPUs`` (the most loaded pipeline stage sets the per-GPU figure), so token capacities are
those of the limiting GPU and bytes are node totals for even splits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.errors import ConfigError, KvsimError
from sim.profiles import load_accelerator, load_model, load_node
from sim.profiles.schema import AcceleratorProfile, ModelProfile
from sim.scenario.load import LoadedScenario
from sim.sizing.kv import kv_bytes_per_token_per_gpu
from sim.units import dtype_bytes


@dataclass(frozen=True)
class Tiers:
    """The node's tiers below HBM and its host links, for the pause policies."""

    host_pool_bytes: float  # pinned host-DRAM KV pool of the node (0 = none)
    nvme_pool_bytes: float  # NVMe KV capacity (0 = none)
    nvme_bw_bytes_per_s: float  # all drives together (0 = none)
    link_bw_bytes_per_s: float  # per GPU, one direction
    link_overhead_s: float  # per transfer
    link_sharing: str  # fifo | fair


@dataclass(frozen=True)
class Resolved:
    """A scenario plus everything derived from its profiles."""

    loaded: LoadedScenario
    model: ModelProfile
    accelerator: AcceleratorProfile
    num_gpus: int
    weights_bytes_per_gpu: float
    kv_pool_bytes_per_gpu: float
    kv_bytes_per_token_per_gpu: float
    allocator_kind: str
    allocator_options: dict[str, Any]
    tiers: Tiers | None = None

    @property
    def scenario(self):
        return self.loaded.scenario

    @property
    def pool_bytes(self) -> float:
        """The engine instance's KV pool (all its GPUs)."""
        return self.kv_pool_bytes_per_gpu * self.num_gpus

    @property
    def kv_bytes_per_token(self) -> float:
        """KV bytes per token over the engine instance."""
        return self.kv_bytes_per_token_per_gpu * self.num_gpus


def _located(loaded: LoadedScenario, loc: tuple, exc: KvsimError) -> ConfigError:
    msg = getattr(exc, "message", None) or str(exc)
    sub = getattr(exc, "field", None)
    field = ".".join(str(p) for p in loc) + (f".{sub}" if sub else "")
    where = loaded.where(*loc, *(sub.split(".") if sub else ()))
    return ConfigError(msg, location=where, field=field)


def resolve(loaded: LoadedScenario) -> Resolved:
    """Profiles, pool size and allocator options of a validated scenario."""
    sc = loaded.scenario
    hw = sc.hardware
    try:
        model = load_model(sc.model.profile, overrides=sc.model.overrides)
    except KvsimError as exc:
        raise _located(loaded, ("model",), exc) from None
    try:
        acc = load_accelerator(hw.accelerator, overrides=hw.accelerator_overrides)
    except KvsimError as exc:
        raise _located(loaded, ("hardware", "accelerator"), exc) from None
    try:
        kv_gpu = kv_bytes_per_token_per_gpu(model, hw.tp, hw.pp)
    except KvsimError as exc:
        raise _located(loaded, ("hardware", "tp"), exc) from None
    n_gpus = hw.tp * hw.pp
    w_total = sc.cost.weights_bytes or model.params_total * dtype_bytes(model.weight_dtype)
    w_gpu = w_total / n_gpus
    if hw.kv_pool_bytes_per_gpu is not None:
        pool_gpu = hw.kv_pool_bytes_per_gpu
    else:
        pool_gpu = acc.memory_bytes * hw.gpu_memory_utilization - w_gpu - hw.reserve_bytes_per_gpu
        if pool_gpu <= 0:
            raise ConfigError(
                f"no memory left for KV: {acc.memory_bytes:.4g} B x {hw.gpu_memory_utilization} "
                f"- {w_gpu:.4g} B of weights - {hw.reserve_bytes_per_gpu:.4g} B reserved per GPU "
                f"(raise tp/pp or set kv_pool_bytes_per_gpu)",
                location=loaded.where("hardware"),
                field="hardware",
            )
    kind, options = _allocator_options(loaded, model)
    tiers = _tiers(loaded, acc)
    return Resolved(loaded, model, acc, n_gpus, w_gpu, pool_gpu, kv_gpu, kind, options, tiers)


def _tiers(loaded: LoadedScenario, acc: AcceleratorProfile) -> Tiers:
    """Host and NVMe pools from the node profile (or the explicit sizes), the link."""
    hw = loaded.scenario.hardware
    host = nvme = nvme_bw = 0.0
    if hw.node is not None:
        try:
            node = load_node(hw.node)
        except KvsimError as exc:
            raise _located(loaded, ("hardware", "node"), exc) from None
        host = node.host_dram_bytes * node.pinned_host_fraction
        if node.nvme_drives and node.nvme_capacity_bytes_per_drive:
            nvme = float(node.nvme_drives * node.nvme_capacity_bytes_per_drive)
            nvme_bw = node.nvme_drives * (node.nvme_bw_bytes_per_s_per_drive or 0.0)
    if hw.host_kv_pool_bytes is not None:
        host = hw.host_kv_pool_bytes
    if hw.nvme_kv_pool_bytes is not None:
        nvme = hw.nvme_kv_pool_bytes
    if nvme > 0 and nvme_bw <= 0:
        raise ConfigError(
            "an NVMe pool needs drives with a bandwidth: set hardware.node to a node profile "
            "with NVMe drives",
            location=loaded.where("hardware", "nvme_kv_pool_bytes"),
            field="hardware.nvme_kv_pool_bytes",
        )
    link = hw.host_link_bw_bytes_per_s or acc.host_link.usable_bw_bytes_per_s
    return Tiers(host, nvme, nvme_bw, link, hw.host_link_overhead_s, hw.link_sharing)


def _allocator_options(loaded: LoadedScenario, model: ModelProfile) -> tuple[str, dict]:
    sc = loaded.scenario
    options = sc.allocator.model_dump()
    kind = options.pop("kind")
    if "max_tokens" in options and options["max_tokens"] is None:
        derived = sc.scheduler.model_dump().get("max_model_len") or model.max_context_tokens
        if derived is None:
            raise ConfigError(
                "needs max_tokens (S_max): the model profile has no max_context_tokens and "
                "scheduler.max_model_len is not set",
                location=loaded.where("allocator"),
                field="allocator.max_tokens",
            )
        options["max_tokens"] = int(derived)
    return kind, options


def make_allocator_for(resolved: Resolved):
    """The run's allocator, with option errors located in the scenario."""
    from sim.memory import make_allocator

    try:
        return make_allocator(
            resolved.allocator_kind,
            pool_bytes=resolved.pool_bytes,
            kv_bytes_per_token=resolved.kv_bytes_per_token,
            **resolved.allocator_options,
        )
    except KvsimError as exc:
        raise _located(resolved.loaded, ("allocator",), exc) from None
