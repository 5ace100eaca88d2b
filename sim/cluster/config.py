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
validated (``sim.run.cluster``), with the group's location. ``cluster_section(routers)``
is the section for the routers registered at a call (``ClusterSection`` itself for the
shipped ones), so a router registered late is accepted (``sim.scenario.schema``).
"""

from __future__ import annotations

import functools
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator, model_validator

from sim.cluster.routers import router_class, router_options_models, router_options_union
from sim.config_model import ConfigModel
from sim.profiles.bounds import MAX_BW_BYTES_PER_S

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


class _Cfg(ConfigModel):
    # defer_build: built as a part of the scenario model (its cluster section)
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False, defer_build=True)


class NodeGroup(_Cfg):
    """``count`` identical nodes; each section given overrides the top-level one."""

    count: int = Field(1, ge=1, le=MAX_NODES)
    hardware: dict[str, Any] | None = None  # e.g. {accelerator: h200-sxm-141gb, tp: 2}
    allocator: dict[str, Any] | None = None
    scheduler: dict[str, Any] | None = None
    tiers: dict[str, Any] | None = None  # the tier keys of hardware (TIER_KEYS)
    # what its nodes do (docs/cluster.md, disaggregated prefill and decode): ``both``
    # serves whole requests (every cluster before roles); ``prefill`` computes prompts
    # and ships their KV; ``decode`` receives it and generates
    role: Literal["prefill", "decode", "both"] = "both"

    @field_validator("tiers")
    @classmethod
    def _tier_keys(cls, v):
        bad = [k for k in v or {} if k not in TIER_KEYS]
        if bad:
            raise ValueError(f"unknown tier key {bad[0]!r}; valid: {', '.join(TIER_KEYS)}")
        return v


#: the routers registered when this module was imported (the shipped ones)
_ROUTERS = router_options_models()
RouterOptions = router_options_union(_ROUTERS)


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


class TransferLink(_Cfg):
    """The link a prefill group ships KV over to a decode group (one per pair of groups):
    ``concurrency`` transfers at a time, each taking ``latency_s + bytes / bandwidth``;
    ``layerwise`` streaming sends each layer as the prefill finishes it, so only the last
    layer's share (and whatever the link could not keep up with) is left after the
    prefill; ``after_prefill`` sends everything once the prefill has ended."""

    # 400 Gb/s RDMA NIC: 50e9
    bandwidth_bytes_per_s: float = Field(50e9, gt=0, le=MAX_BW_BYTES_PER_S)
    latency_s: float = Field(10e-6, ge=0, le=10)
    concurrency: int = Field(8, ge=1, le=1 << 16)
    streaming: Literal["layerwise", "after_prefill"] = "layerwise"
    # conditional disaggregation (Dynamo, llm-d): prefill remotely only when more than
    # this many prompt tokens are not already on the decode instance; else the decode
    # instance prefills them itself. 0: every request is prefilled remotely
    remote_prefill_min_tokens: int = Field(0, ge=0)


class ClusterSection(_Cfg):
    """Several nodes behind one router (docs/cluster.md)."""

    nodes: list[NodeGroup] = Field(min_length=1, max_length=MAX_NODES)
    router: RouterOptions = router_class("round_robin").Options()  # type: ignore[valid-type]
    network_delay_s: float = Field(0.0, ge=0, le=60)  # router -> node, each message
    data_parallel: DataParallel | None = None  # the nodes are one engine's DP ranks
    # the KV link of a disaggregated cluster (groups with role prefill and decode)
    transfer: TransferLink | None = None

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

    @model_validator(mode="before")
    @classmethod
    def _pd_router(cls, data):
        """A disaggregated cluster places requests itself (decode: the sequence's home, else
        the least loaded; prefill: the least loaded), so a router is refused there."""
        if not isinstance(data, dict) or "router" not in data:
            return data
        nodes = data.get("nodes")
        roles = [g.get("role", "both") for g in nodes if isinstance(g, dict)] if isinstance(nodes, list) else []
        if any(r != "both" for r in roles):
            raise ValueError(
                "a cluster with prefill/decode roles places requests itself (decode: the "
                "sequence's home, else the least loaded; prefill: the least loaded); drop router"
            )
        return data

    @model_validator(mode="after")
    def _pd_roles(self):
        roles = {g.role for g in self.nodes}
        if roles == {"both"}:
            if self.transfer is not None:
                raise ValueError("transfer needs node groups with role: prefill and role: decode")
            return self
        if "both" in roles:
            raise ValueError("node roles are all both, or prefill and decode (no both beside them)")
        if "decode" not in roles:
            raise ValueError("a prefill group needs a decode group (role: decode) to ship its KV to")
        if "prefill" not in roles:
            raise ValueError("a decode group needs a prefill group (role: prefill)")
        if self.data_parallel is not None:
            raise ValueError("data_parallel ranks have no prefill/decode roles")
        return self

    @property
    def link(self) -> TransferLink:
        """The KV link's settings (the defaults when ``transfer`` is not given)."""
        return self.transfer or TransferLink.model_validate({})

    @property
    def disaggregated(self) -> bool:
        """Prefill and decode on separate node groups."""
        return any(g.role != "both" for g in self.nodes)

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


def cluster_section(routers: tuple[type[BaseModel], ...]) -> type[ClusterSection]:
    """The section whose ``router`` is the union of ``routers`` (each registered router's
    options, ``router_options_models()``): ``ClusterSection`` for the shipped routers."""
    return ClusterSection if routers == _ROUTERS else _cluster_section_for(routers)


@functools.lru_cache(maxsize=16)
def _cluster_section_for(routers: tuple[type[BaseModel], ...]) -> type[ClusterSection]:
    router = router_options_union(routers)  # type: ignore[arg-type]
    return create_model(
        "ClusterSection",
        __base__=ClusterSection,
        __doc__=ClusterSection.__doc__,
        router=(router, ClusterSection.model_fields["router"].default),
    )


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


def node_roles(section: ClusterSection) -> list[str]:
    """The role of each node, in node-id order."""
    return [g.role for g in section.nodes for _ in range(g.count)]


def node_groups(section: ClusterSection) -> list[int]:
    """The group index of each node, in node-id order."""
    return [i for i, g in enumerate(section.nodes) for _ in range(g.count)]
