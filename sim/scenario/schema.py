"""The scenario file's schema (pydantic v2): one YAML describes a whole simulation.

Responsibility: every section and its defaults, with ``kind:`` discriminators for the
allocator, scheduler, pause policy, workload and arrival process. The allocator section
is derived from the memory layer's registry (each kind's constructor options), so a kind
that registers there is accepted here with exactly its options; schedulers, pause
policies and routers (``cluster.router``) come from their registries, workloads from
``sim.workload.kind_models`` (the shipped kind a document names, and ``plugin_kinds``:
the kinds registered besides them) or ``sim.workload.mix_config`` (every kind).

Invariant: every model forbids unknown fields (``extra="forbid"``) and is frozen;
``schema_version`` is 1; byte figures are bytes, times seconds. The registries are read
lazily: ``scenario_model()`` is built for the registries' contents at the call (cached by
those contents), so an allocator, scheduler, pause policy, router or workload kind
registered after this module was imported, or after an earlier ``scenario_model()`` call,
is accepted from then on; a document naming a workload kind not registered yet runs the
workload plug-in loaders first (``sim.plugins``).
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Annotated, Any, Literal, Union, get_type_hints

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    create_model,
    model_validator,
)

import sim.prefix  # noqa: F401  (registers the radix and paged_hash allocator kinds)
from sim.config_model import ConfigModel
from sim.cost import CostConfig
from sim.plugins import load_plugins
from sim.policy import PolicyOptions, options_union, policy_class
from sim.policy.base import POLICY_MODULES
from sim.policy.registry import policy_options_models
from sim.profiles.layer_groups import DType
from sim.sched.speculative import SpeculativeConfig
from sim.workload.distributions import FLOAT_TEXT_PATTERN
from sim.workload.kind_models import WORKLOAD_MODELS, plugin_kinds, workload_models

SCHEMA_VERSION = 1


def __getattr__(name: str) -> Any:
    """``PausePolicy``: the ``pause_policy`` section's type, every policy registered now
    (kept for readers of the name; built on access, which imports every policy's module,
    so that importing this module imports none)."""
    if name == "PausePolicy":
        return options_union()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class _Cfg(ConfigModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def _name_is_profile(value: Any) -> Any:
    return {"profile": value} if isinstance(value, str) else value


class ModelSection(_Cfg):
    """The model: a profile name (``kvsim profiles list``), optionally with field overrides."""

    profile: str
    overrides: dict[str, Any] = Field(default_factory=dict)  # e.g. {params_total: 70e9}
    # the KV element type (FP8-KV, NVFP4-KV variants): the profile's kv_dtype, set for the
    # layer groups that do not pin their own; same as overrides: {kv_dtype: ...}
    kv_dtype: DType | None = None
    # vLLM's --mamba-cache-mode: whether a model with state-space layers keeps saved states
    # at block boundaries for prefix caching (auto: as vLLM settles it from the prefix
    # cache; none: no saved state, no prefix hit; all: a state at every block boundary;
    # align: refused, not modelled). docs/prefix_cache.md
    mamba_cache_mode: Literal["auto", "none", "all", "align"] = "auto"

    def profile_overrides(self) -> dict[str, Any]:
        """The profile field overrides, ``kv_dtype`` included when set."""
        if self.kv_dtype is None:
            return dict(self.overrides)
        return {**self.overrides, "kv_dtype": self.kv_dtype}


class HardwareSection(_Cfg):
    """One engine instance: ``tp x pp`` accelerators of one kind, and its KV pool (F34)."""

    accelerator: str  # an accelerator profile name
    accelerator_overrides: dict[str, Any] = Field(default_factory=dict)
    tp: int = Field(1, ge=1)
    pp: int = Field(1, ge=1)
    # data-parallel ranks the routed experts of a MoE model are spread over (set for each
    # rank by cluster.data_parallel; 1: this engine holds every expert)
    expert_shards: int = Field(1, ge=1, le=256)
    gpu_memory_utilization: float = Field(0.9, gt=0, le=1)  # vLLM's share of HBM it may use
    reserve_bytes_per_gpu: float = Field(0.0, ge=0)  # activations, runtime (F34 M_act)
    kv_pool_bytes_per_gpu: float | None = Field(None, gt=0)  # explicit pool: skips F34
    # tiers below HBM (pause policies): a node profile's pinned host DRAM and NVMe drives,
    # or explicit sizes; no node and no size = no such tier
    node: str | None = None  # a node profile name (``kvsim profiles list``)
    host_kv_pool_bytes: float | None = Field(None, ge=0)  # pinned host-DRAM KV pool (node)
    nvme_kv_pool_bytes: float | None = Field(None, ge=0)  # NVMe KV capacity (node's drives)
    # host link per GPU, one direction: this, else the calibration's copy fit (when
    # cost.calibration is set), else the accelerator profile's usable figure
    host_link_bw_bytes_per_s: float | None = Field(None, gt=0)
    # per transfer (DMA setup): this, else the calibration's fitted latency, else 0
    host_link_overhead_s: float | None = Field(None, ge=0)
    link_sharing: Literal["fifo", "fair"] = "fifo"


class PricingSection(_Cfg):
    """Prices for the cost figures of summary.json (``usd_*``); ``null`` takes the
    accelerator profile's example ``usd_per_gpu_hour`` (documented examples, not quotes)."""

    usd_per_gpu_hour: float | None = Field(None, gt=0, le=1e6)
    price_source: str | None = None  # where your figure comes from (shown in summary.json)


#: the default ``metrics.phi_ext_request_tokens``: a typical agent turn's new context
DEFAULT_PHI_EXT_REQUEST_TOKENS = 2048


class MetricsSection(_Cfg):
    """Options of the recorded tables (what is measured, never how the engine runs)."""

    # memory.parquet's ``phi_ext``: F9 for a request of this many tokens (its KV bytes)
    phi_ext_request_tokens: int = Field(DEFAULT_PHI_EXT_REQUEST_TOKENS, ge=1, le=10**9)
    # summary.json's ``prefix_recomputed_tokens`` and the "prefix cache past its
    # capacity" warning (``sim.metrics.evicted_reuse``): off by default, since counting
    # turns the prefix index's lazy fills off and hashes every fill (about 1.5x the loop
    # of a radix agents run, docs/prefix_cache.md)
    count_prefix_churn: bool = False


#: the default ``engine.max_sim_time_s``: 30 simulated days
DEFAULT_MAX_SIM_TIME_S = 30 * 86_400.0


class EngineConfig(_Cfg):
    """How the node process runs."""

    exact: bool = False  # step every iteration (no fast decode runs)
    check_invariants: bool = False  # check memory and queues after every decision (slow)
    # a guard, not a horizon (that is ``duration_s``): a run whose simulated clock passes
    # it (a tool pause of years, a workload that never ends) stops with an error naming
    # the unfinished trajectories
    max_sim_time_s: float = Field(DEFAULT_MAX_SIM_TIME_S, gt=0, allow_inf_nan=False)


#: allocator options whose default depends on the scenario (filled when the run is built)
DERIVED_ALLOCATOR_DEFAULTS = {("static", "max_tokens")}


def _json_safe(tp: Any) -> Any:
    """``tp`` when pydantic can describe it in a JSON Schema, else ``Any`` (a protocol
    object: accept any value). Always ``tp`` itself: the cache keeps only the yes or no,
    since types that compare equal can differ (``Literal['y', 'x'] == Literal['x', 'y']``)."""
    try:
        ok = _describable(tp)
    except TypeError:  # an unhashable annotation: checked without the cache
        ok = _describable.__wrapped__(tp)
    return tp if ok else Any


@functools.lru_cache(maxsize=64)
def _describable(tp: Any) -> bool:
    """Whether pydantic can describe ``tp`` in a JSON Schema (once per type: the allocator
    kinds share a handful of option types)."""
    try:
        TypeAdapter(tp).json_schema()
        return True
    except Exception:  # a type pydantic cannot describe
        return False


def _allocator_registry() -> tuple[tuple[str, type], ...]:
    from sim.memory import allocator_class, allocator_kinds

    return tuple((kind, allocator_class(kind)) for kind in allocator_kinds())


def allocator_models() -> tuple[type[BaseModel], ...]:
    """One config model per registered allocator kind, from its constructor's options (the
    kinds registered now)."""
    return _allocator_models_for(_allocator_registry())


def _allocator_models_for(registry: tuple[tuple[str, type], ...]) -> tuple[type[BaseModel], ...]:
    return tuple(_allocator_model(kind, cls) for kind, cls in registry)


@functools.lru_cache(maxsize=64)
def _allocator_model(kind: str, cls: type) -> type[BaseModel]:
    """The config model of allocator ``kind`` (class ``cls``), from its options (one class
    per kind and class: the full union and a model narrowed to the kind share it)."""
    from sim.memory import allocator_options

    options = allocator_options(kind)
    hints = get_type_hints(cls.__init__)
    fields: dict[str, Any] = {"kind": (Literal[kind], kind)}
    for name, default in options.items():
        tp = _json_safe(hints.get(name, Any))
        if (kind, name) in DERIVED_ALLOCATOR_DEFAULTS:
            fields[name] = (tp | None, None)
        elif default is inspect.Parameter.empty:
            fields[name] = (tp, ...)
        else:
            fields[name] = (tp, default)
    title = "".join(p.capitalize() for p in kind.split("_")) + "Allocator"
    model: type[BaseModel] = create_model(title, __base__=_Cfg, **fields)
    return model


def _union(models: tuple[type[BaseModel], ...]) -> Any:
    if len(models) == 1:
        return models[0]
    return Annotated[Union[models], Field(discriminator="kind")]  # noqa: UP007


class ScenarioBase(_Cfg):
    """Sections whose shape does not depend on registries."""

    # never validated itself: ``scenario_model()`` builds its subclass, so building this
    # class's validator too would build the whole scenario schema twice
    model_config = ConfigDict(defer_build=True)

    schema_version: Literal[1] = 1
    name: str = "scenario"
    description: str = ""
    seed: int = Field(0, ge=0)
    duration_s: float | None = Field(None, gt=0)  # stop the engine here (None: run to the end)
    model: Annotated[ModelSection, BeforeValidator(_name_is_profile)]
    hardware: HardwareSection
    cost: CostConfig = CostConfig()
    # the union of the pause policies, set as the workload's is (every policy, or the one a
    # document names)
    pause_policy: PolicyOptions = policy_class("hold").Options()
    # the union of the workload kinds, set by ``scenario_model()`` (every kind) or
    # ``scenario_model_for(data)`` (the kind a document names); declared here for its place
    workload: Any
    engine: EngineConfig = EngineConfig()
    pricing: PricingSection = PricingSection()
    metrics: MetricsSection = MetricsSection()
    # several nodes behind a router (docs/cluster.md); None: one node (the sections above).
    # Its type (``sim.cluster.config.ClusterSection | None``) is set where the workload's is
    cluster: Any = None
    # speculative decoding (sim.sched.speculative, docs/engine.md); None: off
    speculative: SpeculativeConfig | None = None

    @model_validator(mode="after")
    def _tp_pp(self):
        if self.hardware.tp * self.hardware.pp < 1:
            raise ValueError("tp x pp must be >= 1")
        return self


def scenario_model() -> type[BaseModel]:
    """The full scenario model: every workload kind, and the allocator, scheduler,
    pause-policy, router and workload unions of the kinds registered now (the same class
    while the registries do not change)."""
    return _scenario_model(None, plugin_kinds())


def scenario_model_for(data: Any) -> tuple[type[BaseModel], bool]:
    """(the model to validate ``data`` with first, whether it is narrowed): a scenario
    model whose ``workload`` union holds only the kind ``data`` names, so only that kind's
    module is imported and only its validator built; the full model when ``data`` names no
    single known kind (or a ``mix``, whose components may be of any kind). A narrowed
    model of a document without a ``cluster`` section holds ``cluster: None`` alone while
    ``sim.cluster.config`` is not imported.

    A narrowed model accepts a document exactly when the full one does, with the same
    result (the ``kind`` tag picks the same class in both); its error messages would not
    list every valid kind, so a document it refuses is validated again with the full
    model, whose errors are the ones reported (``sim.scenario.load``). A plug-in kind
    (``sim.workload.kind_models.plugin_kinds``) is narrowed to as a shipped one is."""
    workload = data.get("workload") if isinstance(data, dict) else None
    kind = workload.get("kind") if isinstance(workload, dict) else None
    # without the section, ``cluster: None`` alone spares importing sim.cluster; once it is
    # imported (a cluster's node scenarios) the model with the section serves both
    cluster = not isinstance(data, dict) or data.get("cluster") is not None
    cluster = cluster or "sim.cluster.config" in sys.modules
    policy, allocator = _named_policy(data), _named_allocator(data)
    if isinstance(kind, str) and kind in WORKLOAD_MODELS and kind != "mix":
        return _scenario_model((kind,), (), cluster, policy, allocator), True
    plugins = _plugin_kinds(workload)
    named = tuple(p for p in plugins if p[0] == kind)
    if named:
        return _scenario_model((), named, cluster, policy, allocator), True
    return _scenario_model(None, plugins), False


def _named_policy(data: Any) -> str | None:
    """The shipped pause policy ``data`` names (``hold`` when it has no ``pause_policy``
    section), whose module alone a narrowed model imports; None for any other section (a
    plug-in's name, no readable kind): the narrowed model then holds every policy."""
    if not isinstance(data, dict):
        return None
    section = data.get("pause_policy", {"kind": "hold"})
    kind = section.get("kind") if isinstance(section, dict) else None
    return kind if isinstance(kind, str) and kind in POLICY_MODULES else None


def _named_allocator(data: Any) -> str | None:
    """The allocator kind ``data`` names (``paged`` when it has no ``allocator`` section),
    whose config model alone a narrowed model builds; None for a section naming none: the
    narrowed model then holds every registered kind (an unknown one is refused and worded
    by the full model)."""
    if not isinstance(data, dict):
        return None
    section = data.get("allocator", {"kind": "paged"})
    kind = section.get("kind") if isinstance(section, dict) else None
    return kind if isinstance(kind, str) else None


def _plugin_kinds(workload: Any) -> tuple[tuple[str, type], ...]:
    """The plug-in workload kinds registered now, after the ``workloads`` plug-in loaders
    have run when ``workload`` (or a component of it, a mix's) names a kind that is
    neither shipped nor registered (a loader may register it)."""
    plugins = plugin_kinds()
    parts = [workload]
    if isinstance(workload, dict) and isinstance(workload.get("components"), list):
        parts += workload["components"]
    known = {*WORKLOAD_MODELS, *dict(plugins)}
    named = (p.get("kind") for p in parts if isinstance(p, dict))
    if any(isinstance(k, str) and k not in known for k in named):
        load_plugins("workloads")
        plugins = plugin_kinds()
    return plugins


def _scenario_model(
    workloads: tuple[str, ...] | None,
    plugins: tuple[tuple[str, type], ...] = (),
    cluster: bool = True,
    policy: str | None = None,
    allocator: str | None = None,
) -> type[BaseModel]:
    """The scenario model of ``workloads`` and ``plugins`` (``_workload_union``), with the
    ``cluster`` section or ``None`` alone, the pause policy ``policy`` alone (its module
    alone imported) or, None, every registered one, and the allocator kind ``allocator``
    alone (its config model alone built) or, None or not registered, every registered
    one."""
    from sim.sched import scheduler_configs

    policies = (policy_class(policy).Options,) if policy else policy_options_models()
    registry = _allocator_registry()
    allocators = tuple(p for p in registry if p[0] == allocator) or registry
    paged = next((p for p in registry if p[0] == "paged"), registry[0])  # the default
    return _scenario_model_for(allocators, paged, scheduler_configs(), policies,
                               _routers() if cluster else None, workloads, plugins)  # fmt: skip


def _routers() -> tuple[type[BaseModel], ...]:
    from sim.cluster.routers import router_options_models

    return router_options_models()


@functools.lru_cache(maxsize=32)
def _scenario_model_for(
    allocators: tuple[tuple[str, type], ...],
    default_allocator: tuple[str, type],
    schedulers: tuple[type[BaseModel], ...],
    policies: tuple[type[BaseModel], ...],
    routers: tuple[type[BaseModel], ...] | None,
    workloads: tuple[str, ...] | None,
    plugins: tuple[tuple[str, type], ...],
) -> type[BaseModel]:
    from sim.sched import VllmV1Config

    allocator = _union(_allocator_models_for(allocators))
    return create_model(
        "Scenario",
        __base__=ScenarioBase,
        workload=(_workload_union(workloads, plugins), ...),
        allocator=(allocator, _allocator_model(*default_allocator)()),
        scheduler=(_union(schedulers), VllmV1Config()),
        pause_policy=(_union(policies), policy_class("hold").Options()),
        cluster=(_cluster_type(routers), None),
    )


def _cluster_type(routers: tuple[type[BaseModel], ...] | None) -> Any:
    """The ``cluster`` section's type: the section for ``routers`` or ``None``; ``None``
    alone (``routers`` None) in a model narrowed to a document without the section (a
    one-node scenario does not import ``sim.cluster``: its routers and their options)."""
    if routers is None:
        return None
    from sim.cluster.config import cluster_section

    return cluster_section(routers) | None


def _workload_union(kinds: tuple[str, ...] | None, plugins: tuple[tuple[str, type], ...]) -> Any:
    """The ``workload`` section's type: every shipped kind and ``plugins``
    (``sim.workload.mix_config.workload_union``), or the union of the shipped ``kinds``
    and ``plugins`` alone."""
    if kinds is None:
        from sim.workload.mix_config import workload_union

        return workload_union(plugins)
    return _union(workload_models(kinds) + tuple(config for _, config in plugins))


def json_schema() -> dict:
    """JSON Schema of a scenario file (for editor completion and ``jsonschema`` checks).

    The models' own schema plus the shorthands their validators accept before
    validation: ``model: NAME`` (a profile name) and a bare number for a distribution (a
    constant). Every shipped scenario validates against it (tested).
    """
    schema = scenario_model().model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "kvsim scenario"
    model = schema["properties"]["model"]
    schema["properties"]["model"] = {
        "anyOf": [{"type": "string", "description": "a model profile name"}, model],
        "title": "Model",
    }
    return _with_number_shorthand(schema)


def _is_distribution(node: dict) -> bool:
    mapping = node.get("discriminator", {}).get("mapping", {})
    return mapping.get("constant", "").endswith("/Constant") and "oneOf" in node


def _with_number_shorthand(node: Any) -> Any:
    """Every distribution (a union tagged ``constant``, ``lognormal``, ...) also accepts a
    bare number, and a float literal with an exponent written as text (YAML 1.1 reads
    ``1e9`` as a string), exactly as ``sim.workload.distributions.Dist`` does."""
    if isinstance(node, list):
        return [_with_number_shorthand(x) for x in node]
    if not isinstance(node, dict):
        return node
    node = {k: _with_number_shorthand(v) for k, v in node.items()}
    if _is_distribution(node):
        outer = {k: node.pop(k) for k in ("title", "default", "description") if k in node}
        number = {"type": "number", "description": "a constant"}
        text = {
            "type": "string",
            "pattern": FLOAT_TEXT_PATTERN,
            "description": "a constant written with an exponent, such as 1e9",
        }
        return {"anyOf": [number, text, node], **outer}
    return node
