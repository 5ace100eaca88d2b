"""Resolving a validated scenario into the numbers a run needs (profiles, the KV pool).

Responsibility: load the model and accelerator profiles, fill the context window
(``scheduler.max_model_len`` defaults to the model's ``max_context_tokens``), apply TP/PP
(F1 per GPU), size
the KV pool (F34: ``memory x gpu_memory_utilization - weights - reserve`` per GPU, or the
explicit ``kv_pool_bytes_per_gpu``; the weights are the checkpoint's,
``ModelProfile.weights_bytes``, plus a speculative drafter's), fill derived allocator defaults, read the named
calibration (a file path is relative to the scenario's folder, like a trace path, and is
made absolute in the resolved scenario so the cost model reads the same file), and check
that the allocator can be built. Errors point at the scenario line of the field that
caused them.

Invariant: memory figures of a run are for the whole engine instance (all ``tp x pp``
GPUs): ``pool_bytes = pool per GPU x GPUs`` and ``kv_bytes_per_token = KV per token per GPU
x GPUs`` (the most loaded pipeline stage sets the per-GPU figure), so token capacities are
those of the limiting GPU and bytes are node totals for even splits.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from sim.cost.host_link import host_link_fits
from sim.errors import ConfigError, KvsimError
from sim.memory.registry import MAX_POOL_TOKENS
from sim.profiles import load_accelerator, load_model, load_node
from sim.profiles.registry import ProfileOverrideError
from sim.profiles.schema import AcceleratorProfile, ModelProfile
from sim.scenario.load import LoadedScenario
from sim.scenario.mamba_cache import checked_mamba_cache_mode
from sim.scenario.paths import (
    CALIBRATION,
    absolute,
    absolute_calibration,
    missing_file,
    names_a_file,
)
from sim.scenario.speculative import draft_kv, draft_weights_bytes, grouped_draft_layers
from sim.sizing.capacity import stage_weight_bytes
from sim.sizing.group_demand import (
    KVGroups,
    kv_groups,
    saved_state_bytes_per_token,
    with_drafter,
    with_saved_states,
)
from sim.sizing.hybrid_pages import unify_pages
from sim.sizing.kv import kv_bytes_per_token_per_gpu, layers_per_stage
from sim.units import dtype_bytes

#: the largest KV pool a run accepts, in tokens per GPU: ``sim.memory.registry``'s, which
#: ``kvsim alloc-replay`` applies too (imported above; still a name of this module)


@dataclass(frozen=True)
class Tiers:
    """The node's tiers below HBM and its host links, for the pause policies."""

    host_pool_bytes: float  # pinned host-DRAM KV pool of the node (0 = none)
    nvme_pool_bytes: float  # NVMe KV capacity (0 = none)
    nvme_bw_bytes_per_s: float  # all drives together (0 = none)
    link_bw_bytes_per_s: float  # per GPU, one direction (h2d: the reload direction)
    link_overhead_s: float  # per transfer (h2d)
    link_sharing: str  # fifo | fair
    # the copy-out direction when it differs (a calibration fits each); None = as h2d
    d2h_bw_bytes_per_s: float | None = None
    d2h_overhead_s: float | None = None


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
    #: the context window the server enforces (scheduler.max_model_len, filled from the
    #: model's max_context_tokens); None = no window
    context_window_tokens: int | None = None
    #: speculative decoding's drafter (``sim.scenario.speculative``): its KV bytes per token
    #: per GPU, included in ``kv_bytes_per_token_per_gpu`` (0: no drafter KV), and the draft
    #: model's profile (None: no separate draft model)
    draft_kv_bytes_per_token_per_gpu: float = 0.0
    draft_model: ModelProfile | None = None
    #: the layer groups the allocator counts beside its block table (None: a dense model)
    kv_groups: KVGroups | None = None
    #: the scenario's block size when vLLM's page unification raised it for a model with
    #: Mamba/linear-attention states (``allocator_options['block_size']`` is the raised
    #: one, as ``kvsim plan`` reports); None: the block size runs as given
    requested_block_size_tokens: int | None = None
    #: ``model.mamba_cache_mode`` as settled (``sim.scenario.mamba_cache``): none or all
    mamba_cache_mode: str = "none"
    #: the saved states at block boundaries, per block-table token (all GPUs; 0 unless
    #: ``mamba_cache_mode`` is ``all``): included in ``allocator_kv_bytes_per_token``
    saved_state_bytes_per_token: float = 0.0
    #: one layer's saved state's page on one GPU, padded to the attention page as vLLM pads
    #: it (None unless ``mamba_cache_mode`` is ``all``)
    saved_state_page_bytes: float | None = None
    #: what the scenario runs as that vLLM would not (one sentence each; the run's summary
    #: lists them first in ``warnings``, ``kvsim run`` and ``validate`` print them)
    warnings: tuple[str, ...] = ()

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

    @property
    def pool_tokens(self) -> float:
        """The pool in tokens of what the allocator charges per token (a hybrid model's
        block table, saved states and drafter included), not the model's KV bytes per
        token (``kvsim validate``'s ok line)."""
        return self.pool_bytes / self.allocator_kv_bytes_per_token

    @property
    def allocator_kv_bytes_per_token(self) -> float:
        """Bytes per token of the allocator's block table: every layer's (F1) for a dense
        model, those of the layers that keep every token for a hybrid one; a speculative
        drafter's KV (every token, ``draft_kv_bytes_per_token_per_gpu``) is in both, and so
        are the saved states of ``mamba_cache_mode: all`` (``saved_state_bytes_per_token``),
        both folded into a hybrid model's ``kv_groups`` (``with_drafter``,
        ``with_saved_states``), so the allocator's table and its groups agree."""
        if self.kv_groups is None:
            return self.kv_bytes_per_token + self.saved_state_bytes_per_token
        return self.kv_groups.table_bytes_per_token


def _located(loaded: LoadedScenario, loc: tuple, exc: KvsimError) -> ConfigError:
    msg, sub = (exc.message, exc.field) if isinstance(exc, ConfigError) else (str(exc), None)
    field = ".".join(str(p) for p in loc) + (f".{sub}" if sub else "")
    where = loaded.where(*loc, *(sub.split(".") if sub else ()))
    return ConfigError(msg, location=where, field=field)


def _override_located(
    loaded: LoadedScenario, exc: ProfileOverrideError, section: tuple, written: dict | None = None
) -> ConfigError:
    """A profile override's problem at the scenario's override (its ``--set``, or its line
    in the scenario), never at a line of the profile file: ``section`` is where the
    scenario keeps the overrides; a key not in ``written`` (``kv_dtype``, from
    ``model.kv_dtype``) is that field of the section's parent."""
    if exc.key is None:
        loc: tuple = section
    elif written is not None and exc.key not in written:
        loc = (*section[:-1], *exc.key.split("."))
    else:
        loc = (*section, *exc.key.split("."))
    sub = exc.field.split(".")[len(exc.key.split(".")) :] if exc.key and exc.field else []
    field = ".".join(str(p) for p in (*loc, *sub))
    return ConfigError(exc.message, location=loaded.where(*loc), field=field)


def resolve(loaded: LoadedScenario) -> Resolved:
    """Profiles, pool size and allocator options of a validated scenario."""
    sc = loaded.scenario
    hw = sc.hardware
    try:
        model = load_model(sc.model.profile, overrides=sc.model.profile_overrides())
    except ProfileOverrideError as exc:
        raise _override_located(loaded, exc, ("model", "overrides"), sc.model.overrides) from None
    except KvsimError as exc:
        raise _located(loaded, ("model",), exc) from None
    loaded = _context_window(loaded, model)
    sc = loaded.scenario
    try:
        acc = load_accelerator(hw.accelerator, overrides=hw.accelerator_overrides)
    except ProfileOverrideError as exc:
        raise _override_located(loaded, exc, ("hardware", "accelerator_overrides")) from None
    except KvsimError as exc:
        raise _located(loaded, ("hardware", "accelerator"), exc) from None
    n_gpus = hw.tp * hw.pp
    try:
        kv_gpu = kv_bytes_per_token_per_gpu(model, hw.tp, hw.pp)
    except KvsimError as exc:
        raise _located(loaded, ("hardware", "tp"), exc) from None
    try:
        groups = replace(kv_groups(model, hw.tp, hw.pp, num_gpus=n_gpus,
                                   draft_layers=grouped_draft_layers(sc.speculative)),
                         all_bytes_per_token=kv_gpu * n_gpus)  # fmt: skip
    except KvsimError as exc:
        raise _located(loaded, ("model",), exc) from None
    w_total = sc.cost.weights_bytes or model.weights_bytes
    w_gpu = w_total / n_gpus
    shards = hw.expert_shards  # a data-parallel rank holds 1 / shards of the routed experts
    if sc.cluster is not None and sc.cluster.data_parallel is not None:
        shards = sc.cluster.n_nodes  # the top-level sections are every rank's
    if shards > 1:
        w_exp = w_total * min(model.routed_expert_params / model.params_total, 1.0)
        w_gpu = (w_total - w_exp) / n_gpus + w_exp / (n_gpus * shards)
    w_gpu += _stage_excess_bytes(model, w_total, hw.tp, hw.pp)  # the most loaded stage's
    w_gpu += draft_weights_bytes(loaded, model) / n_gpus  # loaded beside the target (TP)
    if hw.kv_pool_bytes_per_gpu is not None:
        pool_gpu = hw.kv_pool_bytes_per_gpu
    else:
        pool_gpu = acc.memory_bytes * hw.gpu_memory_utilization - w_gpu - hw.reserve_bytes_per_gpu
        if pool_gpu <= 0:
            moe_hint = ", spread the routed experts over data-parallel ranks (cluster." \
                "data_parallel)" if model.num_experts else ""  # fmt: skip
            raise ConfigError(
                f"no memory left for KV: {acc.memory_bytes:.4g} B x {hw.gpu_memory_utilization} "
                f"- {w_gpu:.4g} B of weights - {hw.reserve_bytes_per_gpu:.4g} B reserved per GPU "
                f"(raise tp/pp{moe_hint} or set kv_pool_bytes_per_gpu)",
                location=loaded.where("hardware"),
                field="hardware",
            )
    if pool_gpu / kv_gpu > MAX_POOL_TOKENS:
        raise ConfigError(
            f"a KV pool of {pool_gpu / kv_gpu:.4g} tokens per GPU is beyond kvsim's bound of "
            f"{MAX_POOL_TOKENS:.0e} tokens (no real node holds that many; the block tables "
            "would not fit in memory): check kv_pool_bytes_per_gpu and the accelerator's memory",
            location=loaded.where("hardware"),
            field="hardware",
        )
    kind, options = _allocator_options(loaded, model)
    mode, mode_warning = checked_mamba_cache_mode(loaded, model, caches_prefixes(kind))
    try:
        requested = _unify_block_size(options, model, hw.tp, mode)
    except KvsimError as exc:
        raise _located(loaded, ("model", "mamba_cache_mode"), exc) from None
    page = _state_page_padded(options, model, hw.tp, mode)
    groups, saved = _saved_states(groups, options, page)
    draft_gpu, draft = draft_kv(loaded, model, caches_prefixes(kind))
    groups = with_drafter(groups, draft_gpu * n_gpus)  # the drafter rides on the table
    tiers = _tiers(loaded, acc)
    node_warnings = _node_mismatch(loaded, acc.name, n_gpus)
    fp4 = acc.fp4_kv_warning([model.kv_dtype, *(getattr(g, "kv_dtype", None) for g in model.kv_groups())])
    node_warnings = ((fp4,) if fp4 else ()) + node_warnings
    window = sc.scheduler.model_dump().get("max_model_len")
    loaded = absolute_calibration(loaded)  # the cost model reads the same file
    resolved = Resolved(
        loaded, model, acc, n_gpus, w_gpu, pool_gpu, kv_gpu + draft_gpu, kind, options, tiers,
        window, draft_gpu, draft, groups if groups.hybrid else None, requested,
        mamba_cache_mode=mode, saved_state_bytes_per_token=saved,
        saved_state_page_bytes=page,
        warnings=((mode_warning,) if mode_warning else ()) + node_warnings,
    )  # fmt: skip
    _check_pool_holds_a_block(resolved)
    return resolved


def _check_pool_holds_a_block(resolved: Resolved) -> None:
    """Refuse a KV pool of less than one block (one token for a kind without blocks): no
    request could ever be admitted (the run used to start and reject every one)."""
    block = resolved.allocator_options.get("block_size")
    block = block if isinstance(block, int) and not isinstance(block, bool) and block > 1 else 1
    tokens = resolved.pool_tokens
    if tokens >= block:
        return
    hw = resolved.scenario.hardware
    loc = ("hardware", "kv_pool_bytes_per_gpu") if hw.kv_pool_bytes_per_gpu is not None else ("hardware",)
    unit = f"one block of {block} tokens" if block > 1 else "one token"
    raise ConfigError(
        f"the KV pool holds {tokens:.3g} tokens ({resolved.kv_pool_bytes_per_gpu:.4g} B per "
        f"GPU at {resolved.allocator_kv_bytes_per_token / resolved.num_gpus:.4g} B per token "
        f"per GPU), less than {unit}: no request could be admitted (raise "
        "kv_pool_bytes_per_gpu, gpu_memory_utilization or tp)",
        location=resolved.loaded.where(*loc),
        field=".".join(loc),
    )


def _state_page_padded(options: dict, model: ModelProfile, tp: int, mode: str) -> float | None:
    """One saved state's page per layer per GPU under ``all`` (vLLM pads it to the
    attention page, ``PageUnification.state_page_padded_bytes``); None otherwise."""
    block = options.get("block_size")
    if mode != "all" or not isinstance(block, int):
        return None
    return unify_pages(model, block, tp, mamba_cache_mode=mode).state_page_padded_bytes


def _saved_states(groups: KVGroups, options: dict, page: float | None) -> tuple[KVGroups, float]:
    """The engine's groups and the saved-state bytes per table token: under ``all``
    (``page`` set: a saved state's padded page) every block boundary keeps the state
    layers' states, carried on the block table (``with_saved_states``); otherwise
    unchanged and 0."""
    if page is None:
        return groups, 0.0
    block = options["block_size"]
    return (with_saved_states(groups, block, page),
            saved_state_bytes_per_token(groups, block, page))  # fmt: skip


def caches_prefixes(kind: str) -> bool:
    """Whether allocator ``kind`` keeps a prefix cache (it is told token content)."""
    from sim.memory import allocator_class

    return bool(allocator_class(kind).uses_content)


def _context_window(loaded: LoadedScenario, model: ModelProfile) -> LoadedScenario:
    """Fill ``scheduler.max_model_len`` from the model's window (vLLM's default,
    ``max_position_embeddings``); refuse a larger one unless ``allow_long_context``.

    Returns a copy (the caller's scenario object is never edited, so a later run of it with
    another model gets that model's window)."""
    sc = loaded.scenario
    if "max_model_len" not in type(sc.scheduler).model_fields:
        return loaded
    cap, window = sc.scheduler.max_model_len, model.max_context_tokens
    if cap is None:
        if window is None:
            return loaded  # a profile without a window: no cap
        sched = sc.scheduler.model_copy(update={"max_model_len": window})
        return replace(loaded, scenario=sc.model_copy(update={"scheduler": sched}))
    if window is not None and cap > window and not sc.scheduler.allow_long_context:
        raise ConfigError(
            f"{cap:,} exceeds {model.name}'s context window of {window:,} tokens "
            "(max_context_tokens); set scheduler.allow_long_context: true to allow it "
            "(vLLM's VLLM_ALLOW_LONG_MAX_MODEL_LEN)",
            location=loaded.where("scheduler", "max_model_len"),
            field="scheduler.max_model_len",
        )
    return loaded


def _node_mismatch(loaded: LoadedScenario, accelerator: str, n_gpus: int) -> tuple[str, ...]:
    """``hardware.node`` against the scenario's accelerator and GPUs
    (``NodeProfile.mismatch``, each sentence prefixed with where the node is named and the
    field); none without a node (``_tiers`` has loaded it already, so it loads)."""
    name = loaded.scenario.hardware.node
    if name is None:
        return ()
    where = loaded.where("hardware", "node")
    return tuple(f"{where}: hardware.node: {w}" for w in load_node(name).mismatch(accelerator, n_gpus))


def _tiers(loaded: LoadedScenario, acc: AcceleratorProfile) -> Tiers:
    """Host and NVMe pools from the node profile (or the explicit sizes), the link per
    direction (the scenario's figures, else the calibration's copy fits, else the profile)."""
    hw = loaded.scenario.hardware
    host = nvme = nvme_bw = 0.0
    if hw.node is not None:
        try:
            node = load_node(hw.node)
        except KvsimError as exc:
            raise _located(loaded, ("hardware", "node"), exc) from None
        host = node.pinned_host_bytes
        nvme, nvme_bw = node.nvme_tier
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
    links = host_link_fits(
        _calibration(loaded),
        acc.host_link.usable_bw_bytes_per_s,
        bw_bytes_per_s=hw.host_link_bw_bytes_per_s,
        overhead_s=hw.host_link_overhead_s,
    )
    h2d, d2h = links["h2d"], links["d2h"]
    return Tiers(
        host, nvme, nvme_bw, h2d.bw_bytes_per_s, h2d.overhead_s, hw.link_sharing,
        d2h.bw_bytes_per_s, d2h.overhead_s,
    )  # fmt: skip


def _calibration(loaded: LoadedScenario):
    """The scenario's ``cost.calibration`` (None when it names none); a name that is not
    found points at that line, a bad file at its own line."""
    name = loaded.scenario.cost.calibration
    if name is None:
        return None
    if names_a_file(name):  # relative to the scenario's folder, like the trace paths
        missing = missing_file(loaded, CALIBRATION, name)
        if missing is not None:
            raise missing
        name = absolute(name, loaded.base_dir)
    from sim.cost.calibration import load_calibration  # its 25 models: only when named

    try:
        return load_calibration(name)
    except ConfigError:
        raise
    except KvsimError as exc:
        raise _located(loaded, ("cost", "calibration"), exc) from None


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


def _unify_block_size(options: dict, model: ModelProfile, tp: int, mode: str = "none"
                      ) -> int | None:  # fmt: skip
    """Raise ``options['block_size']`` as vLLM does for a model whose state layers need an
    attention page at least one state (``sim.sizing.hybrid_pages``, as ``kvsim plan``);
    returns the block size asked for when raised, else None (dense and windowed models,
    and kinds without blocks, keep their options untouched)."""
    block = options.get("block_size")
    if not isinstance(block, int) or isinstance(block, bool) or block < 1:
        return None  # the allocator's own check reports a bad block size
    pages = unify_pages(model, block, tp, mamba_cache_mode=mode)
    if not pages.raised:
        return None
    options["block_size"] = pages.block_size_tokens
    return block


def make_allocator_for(resolved: Resolved):
    """The run's allocator, with option errors located in the scenario."""
    from sim.memory import make_allocator

    try:
        return make_allocator(
            resolved.allocator_kind,
            pool_bytes=resolved.pool_bytes,
            kv_bytes_per_token=resolved.allocator_kv_bytes_per_token,
            kv_groups=resolved.kv_groups,
            **resolved.allocator_options,
        )
    except KvsimError as exc:
        raise _located(resolved.loaded, ("allocator",), exc) from None


def _stage_excess_bytes(model: ModelProfile, weights_bytes: float, tp: int, pp: int) -> float:
    """Bytes one GPU of the most loaded pipeline stage holds beyond the average
    ``weights / (TP x PP)``: vLLM sizes each stage's pool from its own memory and runs
    with the smallest; the first and last stages hold the embedding and the LM head, the
    middle ones vLLM's extra layers (``sim.sizing.capacity.stage_weight_bytes``, as
    ``kvsim plan`` sizes it). 0 for one stage or a profile without ``vocab_size``. With
    routed experts spread over data-parallel ranks the extra layers' bytes count whole
    (their experts are sharded too, so this over-states the excess by their share)."""
    by_stage = stage_weight_bytes(weights_bytes, layers_per_stage(model.num_layers, pp),
                                  model.vocab_size, model.d_model,
                                  dtype_bytes(model.weight_dtype))  # fmt: skip
    if not by_stage:
        return 0.0
    return (max(by_stage) - weights_bytes / pp) / tp
