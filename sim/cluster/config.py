"""The scenario's ``cluster:`` section: node groups, the router, the network delay, and
whether the nodes are one engine's data-parallel ranks (``data_parallel``).

Responsibility: declare the section (frozen pydantic models) and turn each node group
into the dotted overrides that make that node's own scenario out of the top-level one
(the top-level ``hardware`` / ``allocator`` / ``scheduler`` are every node's defaults;
a group's sections override them key by key, and a group's ``allocator.kind`` or
``scheduler.kind`` that differs drops the default kind's options, as ``--set`` does).

Data-parallel ranks are one identical group; each rank's scenario also gets
``hardware.expert_shards`` = the number of ranks (``node_extra_overrides``).

Invariant: a group's section keys are checked against the section's fields here (one
line naming the valid ones); their values are checked when the node's scenario is
validated (``sim.run.cluster``), with the group's location.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from sim.cluster.routers import router_class, router_options_union

#: most nodes one scenario may declare (each node is an engine with its own pool)
MAX_NODES = 256

#: the keys of ``hardware`` a group's ``tiers`` may set (the tiers below HBM)
TIER_KEYS = (
    "node",
    "host_kv_pool_bytes",
    "nvme_kv_pool_bytes",
    "host_link_bw_bytes_per_s",
    "host_link_overhead_s",
    "link_sharing",
)


class _Cfg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class NodeGroup(_Cfg):
    """``count`` identical nodes; each section given overrides the top-level one."""

    count: int = Field(1, ge=1, le=MAX_NODES)
    hardware: dict[str, Any] | None = None  # e.g. {accelerator: h200-sxm-141gb, tp: 2}
    allocator: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    tiers: dict[str, Any] | None = None  # the tier keys of hardware (TIER_KEYS)

    @field_validator("tiers")
    @classmethod
    def _tier_keys(cls, v):
        bad = [k for k in v or {} if k not in TIER_KEYS]
        if bad:
            raise ValueError(f"unknown tier key {bad[0]!r}; valid: {', '.join(TIER_KEYS)}")
        return v


RouterOptions = router_options_union()


class DataParallel(_Cfg):
    """The nodes are the data-parallel ranks of one vLLM engine on one machine
    (``--data-parallel-size`` = the number of nodes): identical ranks behind vLLM's load
    balancer (router ``vllm_dp`` unless one is given); with a MoE model the routed
    experts are spread over the ranks and the ranks step in lockstep
    (``sim.engine.lockstep``)."""

    # --enable-expert-parallel: each GPU holds whole experts (E / ranks x TP of them);
    # false: every expert sharded over all the GPUs as tensor parallelism
    expert_parallel: bool = True
    # vLLM's max_cudagraph_capture_size: a step whose largest rank batch fits a CUDA graph
    # is padded to it on every rank (DP padding); larger steps run eagerly, unpadded.
    # 0: enforce_eager (never padded)
    cudagraph_max_tokens: int = Field(512, ge=0, le=1 << 20)


class ClusterSection(_Cfg):
    """Several nodes behind one router (docs/cluster.md)."""

    nodes: list[NodeGroup] = Field(min_length=1, max_length=MAX_NODES)
    router: RouterOptions = router_class("round_robin").Options()  # type: ignore[valid-type]
    network_delay_s: float = Field(0.0, ge=0, le=60)  # router -> node, each message
    data_parallel: DataParallel | None = None  # the nodes are one engine's DP ranks

    @field_validator("data_parallel", mode="before")
    @classmethod
    def _dp_form(cls, v):
        """``true`` is ``{}`` (the defaults), ``false`` is none; else a mapping."""
        if v is True:
            return {}
        if v is False:
            return None
        if v is not None and not isinstance(v, dict):
            raise ValueError(
                f"data_parallel is true, false or a mapping {{expert_parallel: true|false, "
                f"cudagraph_max_tokens: N}}, got {v!r}"
            )
        return v

    @model_validator(mode="before")
    @classmethod
    def _dp_router(cls, data):
        """vLLM's own balancer in front of data-parallel ranks unless a router is named."""
        dp = data.get("data_parallel") if isinstance(data, dict) else None
        if dp is not None and dp is not False and "router" not in data:
            return {**data, "router": {"kind": "vllm_dp"}}
        return data

    @model_validator(mode="after")
    def _dp_identical(self):
        if self.data_parallel is not None:
            g = self.nodes
            if len(g) != 1 or g[0].hardware or g[0].allocator or g[0].scheduler or g[0].tiers:
                raise ValueError(
                    "data_parallel ranks are identical: one nodes group ({count: R}, R = "
                    "--data-parallel-size) without its own hardware, allocator, scheduler or "
                    "tiers (the top-level sections are every rank's)"
                )
        return self

    @property
    def n_nodes(self) -> int:
        return sum(g.count for g in self.nodes)

    @field_validator("nodes")
    @classmethod
    def _total(cls, v):
        total = sum(g.count for g in v)
        if total > MAX_NODES:
            raise ValueError(f"{total} nodes in all; at most {MAX_NODES}")
        return v


def group_overrides(group: NodeGroup) -> dict[str, Any]:
    """The dotted overrides that make a group's node scenario (kinds first, so a changed
    kind drops the old kind's options before the new ones are set)."""
    out: dict[str, Any] = {}
    for section in ("allocator", "scheduler"):
        opts = getattr(group, section) or {}
        if "kind" in opts:
            out[f"{section}.kind"] = opts["kind"]
        out.update({f"{section}.{k}": v for k, v in opts.items() if k != "kind"})
    for k, v in {**(group.hardware or {}), **(group.tiers or {})}.items():
        out[f"hardware.{k}"] = v
    return out


def node_extra_overrides(section: ClusterSection) -> dict[str, Any]:
    """Overrides every node of the section gets: a data-parallel rank holds 1 / ranks of
    the routed experts (its weights, hence its KV pool)."""
    if section.data_parallel is None:
        return {}
    return {"hardware.expert_shards": section.n_nodes}


def node_groups(section: ClusterSection) -> list[int]:
    """The group index of each node, in node-id order."""
    return [i for i, g in enumerate(section.nodes) for _ in range(g.count)]
