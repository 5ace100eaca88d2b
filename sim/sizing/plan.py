"""The analytic capacity plan behind ``kvsim plan``.

Invariant: capacity is computed per GPU (its pool over its own KV bytes per token, on the
most loaded pipeline stage), then multiplied by the data-parallel replicas; so it stays
right when heads are replicated (TP > H_kv), for MLA latents held whole on every rank, and
when layers do not divide evenly by PP. ``num_gpus = tp * pp * replicas`` exactly. The
pool per GPU is F34's ``memory x utilization - weights - reserve``, clamped at 0.
Conditions that leave a plan computable but doubtful (a context beyond the model's window,
weights that leave no pool, nothing fitting) are returned as ``warnings``, never raised;
every number in ``PlanInputs`` is finite and in range (``sim.sizing.bounds``), checked when
the object is built. KV is broken down by layer group (``sim.sizing.kv.kv_breakdown``): the
groups of a context sum to its totals. A hybrid model with Mamba or linear-attention layers
gets the block size vLLM raises it to (``sim.sizing.hybrid_pages``), stated, not refused;
under ``mamba_cache_mode: none`` its capacity charges what a run (and vLLM) does: whole
blocks of that size and each state layer's page padded (``running_state_breakdown``);
otherwise capacity ignores paging granularity (block rounding; a dense model's 16-token
blocks), and the padded state page is reported beside it. With a shared prefix
(F37), the prefix is stored once per replica in the groups that hold it at the
trajectories' peak (``sim.sizing.kv.shared_prefix_split``: a window or chunk shares only
its tokens inside the prefix, a running state none), and the pipeline stage that fits the
fewest trajectories decides. A speculative drafter (``PlanInputs.speculative_method``) is
sized by the rule a run resolves (``sim.sizing.speculative``): its KV per token in every
per-token and per-trajectory figure, its weights out of the pool, K lookahead slots held
by each trajectory, and its grouped layer in vLLM's padding; without it every figure is
as if the drafter's code did not exist.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace

from sim.errors import KvsimError
from sim.profiles.layer_groups import STATE_KINDS
from sim.profiles.schema import AcceleratorProfile, ModelProfile
from sim.sizing.bounds import MAX_GPUS, MAX_MEMORY_GB, MAX_PARAMS, MAX_TOKENS, check_number
from sim.sizing.capacity import kv_pool_bytes, stage_weight_bytes, weights_bytes_per_gpu
from sim.sizing.groups import group_bytes
from sim.sizing.hybrid_pages import PageUnification, unify_pages
from sim.sizing.kv import (
    GroupKV,
    kv_breakdown,
    kv_bytes_for_context,
    kv_bytes_for_context_all_gpus,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    kv_peak_for_trajectory,
    layers_per_stage,
    model_layer_padding,
    padded_model_counts,
    shared_prefix_split,
)
from sim.sizing.layer_padding import LayerPadding
from sim.sizing.paging import expected_tail_waste_tokens
from sim.sizing.speculative import (
    MAX_SPECULATIVE_TOKENS,
    METHODS,
    PP_NOT_MODELLED,
    VLLM_ISSUE,
    DrafterSizing,
    drafter_layer_padding,
    drafter_padding_layers,
    drafter_sizing,
)
from sim.units import GB, dtype_bytes

#: ``kvsim plan``'s utilization when no memory or reserve figure is given (as ``kvsim run``)
DEFAULT_GPU_MEMORY_UTILIZATION = 0.9
#: F34 as the chapter applies it: the given figures already account for all of memory
FIGURES_GPU_MEMORY_UTILIZATION = 1.0
#: ``kvsim plan --prefill-chunk-tokens``'s default: vLLM's max_num_batched_tokens (as a run's
#: ``scheduler.max_num_batched_tokens``)
DEFAULT_PREFILL_CHUNK_TOKENS = 8192
#: ``kvsim plan --mamba-cache-mode`` choices (a run also settles auto, from its allocator)
PLAN_MAMBA_CACHE_MODES = ("none", "all")


def default_gpu_memory_utilization(figures_given: bool) -> float:
    """0.9 like ``kvsim run``; 1.0 (F34 as the chapter) when a memory/reserve figure is given."""
    return FIGURES_GPU_MEMORY_UTILIZATION if figures_given else DEFAULT_GPU_MEMORY_UTILIZATION


#: said when a --reserve figure alone switched the utilization to 1.0
RESERVE_ALONE_WARNING = (
    "GPU memory utilization 1 (F34 as the chapter: a --reserve figure was given without "
    "--gpu-mem-*): the reserve replaces the 10 % that kvsim run's 0.9 holds back, so a "
    "reserve under that 10 % gives a larger pool than no reserve; pass "
    "--gpu-memory-utilization 0.9 to plan as kvsim run with hardware.reserve_bytes_per_gpu"
)


#: what the pool's sum (memory x utilization - weights - reserve, F34) leaves out that vLLM
#: subtracts (``gpu_worker.determine_available_memory``: the torch peak of its profile run
#: and the memory torch does not allocate)
POOL_LEFT_OUT = ("vLLM's activation peak (its profile run's torch peak beyond the weights) "
                 "and non-torch memory (CUDA context, NCCL and cuBLAS workspaces)")  # fmt: skip


#: the same, in the few words of a one-line summary (``kvsim validate``, ``capacity``)
POOL_LEFT_OUT_SHORT = "vLLM's activation peak and non-torch memory"


def pool_note(reserve_bytes_per_gpu: float, key: str) -> str:
    """The short note of a pool sized as memory x utilization - weights - reserve: with no
    reserve, that it leaves out ``POOL_LEFT_OUT_SHORT`` and the key that sets one."""
    if reserve_bytes_per_gpu > 0:
        return f"after a reserve of {reserve_bytes_per_gpu / GB:,.2f} GB per GPU"
    return f"reserve 0: {POOL_LEFT_OUT_SHORT} not subtracted, set with {key}"


def pool_leaves_out(reserve_bytes_per_gpu: float, *, key: str = "--reserve-gb-per-gpu") -> str:
    """The sentence of what a KV pool of memory x utilization - weights - reserve leaves
    out: with no reserve, vLLM's activation peak and non-torch memory (``key`` names the
    flag or scenario key that sets one); with one, that it stands for them."""
    if reserve_bytes_per_gpu > 0:
        return (f"the reserve ({reserve_bytes_per_gpu / GB:,.3f} GB per GPU) stands for "
                f"{POOL_LEFT_OUT}")  # fmt: skip
    return f"{POOL_LEFT_OUT}: not subtracted (reserve 0); set them with {key}"


@dataclass(frozen=True)
class PlanInputs:
    """Everything ``kvsim plan`` needs; None means 'from the profile' or the default."""

    model: ModelProfile
    accelerator: AcceleratorProfile
    num_gpus: int
    contexts: list[int]
    tp: int | None = None  # default num_gpus / pp
    pp: int = 1
    output_tokens: int = 0
    kv_dtype: str | None = None
    weight_dtype: str | None = None
    params: float | None = None
    gpu_mem_bytes: float | None = None
    reserve_bytes_per_gpu: float = 0.0
    headroom: float = 0.0
    shared_prefix_tokens: int | None = None
    gpu_memory_utilization: float = FIGURES_GPU_MEMORY_UTILIZATION  # F34's u, in (0, 1]
    block_size: int = 16  # tokens per KV block asked for (vLLM's --block-size)
    #: vLLM's --mamba-cache-mode for a model with state layers: none (one running state per
    #: sequence) or all (a saved state, one padded page per state layer, at every block
    #: boundary, as a run with a prefix cache charges them); plan has no allocator, so it
    #: is not settled from one
    mamba_cache_mode: str = "none"
    #: tokens of a prompt prefilled in one step (vLLM's max_num_batched_tokens, or its
    #: long_prefill_token_threshold when lower): a sliding window or chunk holds the
    #: chunk's blocks too during that step (``peak_kv_bytes_per_trajectory``)
    prefill_chunk_tokens: int = DEFAULT_PREFILL_CHUNK_TOKENS
    #: with PP, size the pool against the most loaded stage's own weights
    #: (``sim.sizing.capacity.stage_weight_bytes``: its layers and embedding or LM head),
    #: as vLLM's smallest stage pool and as ``kvsim run`` sizes it
    #: (``sim.scenario.resolve``); False: the average, N x b / (TP x PP)
    per_stage_weights: bool = True
    #: the KV pool per GPU as given (a run's, ``Resolved.kv_pool_bytes_per_gpu``: what
    #: ``sim.scenario.resolve`` left after its own weights, drafter and expert sharding);
    #: None: F34's ``memory x utilization - weights - reserve``. ``kvsim capacity``'s
    #: estimate passes the run's, so the two never size the pool apart
    kv_pool_bytes_per_gpu: float | None = None
    #: speculative decoding's drafter (``sim.sizing.speculative``, as a run's
    #: ``speculative`` section): vLLM's method, k, and the draft model's profile (method
    #: draft_model only); None: no drafter, and every figure as without one
    speculative_method: str | None = None
    num_speculative_tokens: int | None = None
    draft_model: ModelProfile | None = None

    def __post_init__(self) -> None:
        """Refuse a number out of range (named by its ``kvsim plan`` flag) in one line."""
        check_number(self.num_gpus, "--num-gpus", 1, MAX_GPUS)
        if not self.contexts:
            raise KvsimError("--context: give at least one context length")
        for context in self.contexts:
            check_number(context, "--context", 1, MAX_TOKENS)
        if self.tp is not None:
            check_number(self.tp, "--tp", 1, MAX_GPUS)
        check_number(self.pp, "--pp", 1, MAX_GPUS)
        check_number(self.output_tokens, "--output-tokens", 0, MAX_TOKENS)
        if self.params is not None:
            check_number(self.params, "--params", 0, MAX_PARAMS, low_open=True)
        if self.gpu_mem_bytes is not None:
            check_number(self.gpu_mem_bytes, "gpu_mem_bytes", 0, MAX_MEMORY_GB * GB, low_open=True)
        check_number(self.reserve_bytes_per_gpu, "reserve_bytes_per_gpu", 0, MAX_MEMORY_GB * GB)
        check_number(self.headroom, "--headroom", 0, 1, high_open=True)
        if self.shared_prefix_tokens is not None:
            check_number(self.shared_prefix_tokens, "--shared-prefix-tokens", 0, MAX_TOKENS)
        check_number(self.gpu_memory_utilization, "--gpu-memory-utilization", 0, 1, low_open=True)
        check_number(self.block_size, "--block-size", 1, MAX_TOKENS)
        check_number(self.prefill_chunk_tokens, "--prefill-chunk-tokens", 1, MAX_TOKENS)
        if self.kv_pool_bytes_per_gpu is not None:
            check_number(self.kv_pool_bytes_per_gpu, "kv_pool_bytes_per_gpu", 0, MAX_MEMORY_GB * GB)
        if self.mamba_cache_mode not in PLAN_MAMBA_CACHE_MODES:
            raise KvsimError(f"--mamba-cache-mode: {self.mamba_cache_mode!r} is not one of "
                             f"{', '.join(PLAN_MAMBA_CACHE_MODES)}")  # fmt: skip
        check_speculative(self)


def check_speculative(inputs: PlanInputs) -> None:
    """The drafter's flags, refused in one line each as a scenario's ``speculative``
    section is: an unknown method, k missing or out of 1..32, a draft model missing for
    draft_model or given for another method, pipeline parallelism."""
    method, k = inputs.speculative_method, inputs.num_speculative_tokens
    if method is None:
        if k is not None:
            raise KvsimError("--num-speculative-tokens needs --speculative-method")
        if inputs.draft_model is not None:
            raise KvsimError("--draft-model is only for --speculative-method draft_model")
        return
    if method not in METHODS:
        raise KvsimError(f"--speculative-method: {method!r} is not one of {', '.join(METHODS)}")
    if k is None:
        raise KvsimError(f"--speculative-method {method} needs --num-speculative-tokens K "
                         f"(1 to {MAX_SPECULATIVE_TOKENS})")  # fmt: skip
    check_number(k, "--num-speculative-tokens", 1, MAX_SPECULATIVE_TOKENS)
    if method == "draft_model" and inputs.draft_model is None:
        raise KvsimError("--speculative-method draft_model needs --draft-model NAME")
    if method != "draft_model" and inputs.draft_model is not None:
        raise KvsimError(f"--draft-model is only for --speculative-method draft_model, not {method}")
    if inputs.pp > 1:
        raise KvsimError(f"--speculative-method: {PP_NOT_MODELLED} (use --pp 1)")


@dataclass(frozen=True)
class ContextPlan:
    """Capacity for one context length."""

    context_tokens: int
    trajectory_tokens: int  # context + output tokens
    kv_bytes_per_trajectory: float  # whole model, one copy
    kv_bytes_per_trajectory_per_gpu: float
    max_concurrent: int
    max_concurrent_shared: int | None = None
    shared_prefix_bytes: float | None = None
    # one running state per state-space layer, whole model (included in the totals above)
    state_bytes_per_trajectory: float = 0.0
    # the trajectory over the tp x pp GPUs of its replica, TP replication included (what a
    # run's allocator charges for one request)
    kv_bytes_per_trajectory_all_gpus: float = 0.0
    groups: list[GroupKV] = field(default_factory=list)  # the totals, group by group
    # what vLLM's padding layers take of kv_bytes_per_trajectory (whole model, one copy;
    # included in it; sim.sizing.layer_padding)
    padding_bytes_per_trajectory: float = 0.0
    # the most one trajectory holds at any step (whole model, one copy): its prompt's
    # prefill chunks count too, where a sliding window or chunk holds w - 1 tokens plus
    # the chunk (vLLM V1; sim.sizing.kv.kv_peak_for_trajectory); kv_bytes_per_trajectory
    # (what each of many concurrent trajectories holds) when no step exceeds it
    peak_kv_bytes_per_trajectory: float = 0.0
    # the chunk size that peak assumes (PlanInputs.prefill_chunk_tokens)
    prefill_chunk_tokens: int = 0
    # what a run (and vLLM) charges one trajectory per GPU, which ``max_concurrent``
    # divides the pool by: ``kv_bytes_per_trajectory_per_gpu`` but, for a model with
    # state layers under mamba_cache_mode none, whole blocks of the raised block size and
    # padded state pages (``running_state_breakdown``)
    kv_bytes_per_trajectory_charged_per_gpu: float = 0.0
    # with a shared prefix, per GPU of the pipeline stage that decides
    # ``max_concurrent_shared`` (``deciding_stage``): the prefix stored once and one
    # trajectory's KV beyond it (None without a shared prefix or when nothing is shared)
    shared_prefix_bytes_per_gpu: float | None = None
    private_kv_bytes_per_trajectory_per_gpu: float | None = None
    # the speculative drafter's share of kv_bytes_per_trajectory (whole drafter, one copy,
    # over the trajectory's tokens and lookahead slots; the ``draft`` group; 0 without)
    spec_draft_kv_bytes_per_trajectory: float = 0.0


@dataclass(frozen=True)
class PlanResult:
    """The plan: sizes in bytes, concurrency per context (node totals unless stated)."""

    model: str
    gpu: str
    num_gpus: int
    tp: int
    pp: int
    replicas: int
    kv_dtype: str
    weight_dtype: str
    params: float
    gpu_mem_bytes: float
    gpu_memory_utilization: float
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    weights_bytes_per_gpu: float
    weights_bytes: float
    reserve_bytes_per_gpu: float
    kv_pool_bytes_per_gpu: float
    kv_pool_bytes: float
    headroom: float
    usable_kv_pool_bytes: float
    output_tokens: int
    shared_prefix_tokens: int | None
    contexts: list[ContextPlan] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # paging (vLLM's unified page size): the block size asked for, the one a hybrid model
    # with state layers runs with, and one state layer's page per GPU, exact and padded
    requested_block_size_tokens: int = 16
    block_size_tokens: int = 16
    state_page_bytes_per_gpu: float = 0.0
    state_page_padded_bytes_per_gpu: float = 0.0
    # vLLM's KV cache groups (sim.sizing.layer_padding): layers per group, and the empty
    # layers it adds so every layer kind fills whole groups (0: no padding)
    kv_cache_group_size_layers: int = 0
    padding_layers: int = 0
    # --mamba-cache-mode: all charges a saved state (padded page) per block boundary
    mamba_cache_mode: str = "none"
    # what the pool's sum leaves out that vLLM subtracts (``pool_leaves_out``)
    kv_pool_leaves_out: str = ""
    # with PP and a stated vocabulary: one GPU's weights on each stage (``stage_weight_bytes``);
    # ``weights_bytes_per_gpu`` is the largest (empty: every GPU holds the average)
    weights_bytes_per_gpu_by_stage: list[float] = field(default_factory=list)
    # speculative decoding (--speculative-method; None / 0 without): the drafter's KV per
    # token (included in kv_bytes_per_token and its per-GPU figure, as a run's
    # kv_bytes_per_token includes it), its weights per GPU (included in
    # weights_bytes_per_gpu, out of the pool), the lookahead slots each trajectory holds
    # beyond its tokens (included in its KV) and the drafter layers vLLM groups with the
    # target's full / MLA layers (they can change the padding of the other groups)
    speculative_method: str | None = None
    num_speculative_tokens: int = 0
    draft_model: str | None = None
    spec_draft_kv_bytes_per_token: float = 0.0
    spec_draft_kv_bytes_per_token_per_gpu: float = 0.0
    draft_weights_bytes_per_gpu: float = 0.0
    spec_lookahead_tokens: int = 0
    spec_grouped_draft_layers: int = 0

    def to_dict(self) -> dict:
        """A JSON-ready dict (the ``--json`` contract)."""
        return asdict(self)


def _parallelism(inputs: PlanInputs) -> tuple[int, int, int]:
    pp = inputs.pp
    tp = inputs.tp if inputs.tp is not None else inputs.num_gpus // pp
    if tp < 1 or inputs.num_gpus % (tp * pp):
        raise KvsimError(
            f"--num-gpus {inputs.num_gpus} must be a multiple of tp x pp = {tp} x {pp}"
        )
    return tp, pp, inputs.num_gpus // (tp * pp)


def plan_capacity(inputs: PlanInputs) -> PlanResult:
    """Compute the capacity plan (F1, F4, F5, F34-F37) for each context length."""
    model, gpu = inputs.model, inputs.accelerator
    tp, pp, replicas = _parallelism(inputs)
    util = inputs.gpu_memory_utilization
    kv_dtype = inputs.kv_dtype or model.kv_dtype
    w_dtype = inputs.weight_dtype or model.weight_dtype
    params = inputs.params or model.params_total
    mem = inputs.gpu_mem_bytes or gpu.memory_bytes
    reserve = inputs.reserve_bytes_per_gpu
    if inputs.weight_dtype is None and model.expert_weight_bits is not None:
        # the checkpoint's bytes per parameter (experts in their own format, the profile's
        # ``weights_bytes``), for --params parameters
        b_weight = model.weights_bytes / model.params_total
    else:  # F34: every parameter at one dtype
        b_weight = dtype_bytes(w_dtype)
    w_avg = weights_bytes_per_gpu(params, b_weight, tp, pp)
    # with PP, each stage's own weights (vLLM sizes each stage's pool from its own memory
    # and runs with the smallest): the most loaded stage's; else the average. The
    # embedding and LM head at the dense weights' dtype (experts may be smaller)
    by_stage = stage_weight_bytes(
        params * b_weight, layers_per_stage(model.num_layers, pp), model.vocab_size,
        model.d_model, dtype_bytes(w_dtype),
    ) if inputs.per_stage_weights else None  # fmt: skip
    stage_w = [b / tp for b in by_stage] if by_stage else []
    w_gpu = max(stage_w) if stage_w else w_avg
    drafter = _drafter(inputs, tp, kv_dtype, params * b_weight)
    # int 0 without a drafter: every figure keeps its value and its JSON type
    draft_bpt, draft_bpt_gpu, draft_w_gpu = (
        (drafter.kv_bytes_per_token, drafter.kv_bytes_per_token_per_gpu,
         drafter.weights_bytes_per_gpu) if drafter else (0, 0, 0))  # fmt: skip
    w_gpu += draft_w_gpu  # loaded beside the target, before vLLM sizes the pool
    pool_gpu = inputs.kv_pool_bytes_per_gpu  # a run's own pool: its drafter's weights out
    if pool_gpu is None:
        pool_gpu = kv_pool_bytes(mem * util, w_gpu, reserve, allow_empty=True)
    usable_gpu = pool_gpu * (1 - inputs.headroom)
    pages = unify_pages(model, inputs.block_size, tp, kv_dtype, inputs.mamba_cache_mode)
    saved = pages if inputs.mamba_cache_mode == "all" and pages.state_page_bytes else None
    running = pages if inputs.mamba_cache_mode == "none" and pages.state_page_bytes else None
    planned = [
        _context_plan(model, s, inputs, (tp, pp, replicas), kv_dtype, usable_gpu, saved, running,
                      drafter)
        for s in inputs.contexts
    ]
    contexts = [c for c, _ in planned]
    warnings = [w for _, found in planned for w in found]
    if pool_gpu == 0:  # why nothing fits, once (the per-context reasons would repeat it)
        warnings.append(no_pool_warning(mem, util, w_gpu, reserve))
    if pages.raised:
        warnings.append(raised_block_warning(model.name, pages, running is not None))
    ds_mla = fp8_ds_mla_warning(model, kv_dtype, contexts, usable_gpu, (tp, pp, replicas))
    if ds_mla:
        warnings.append(ds_mla)
    padding = drafter_layer_padding(model, drafter.grouped_layers) if drafter else model_layer_padding(model)
    if padding.total_padding_layers:
        warnings.append(padding_warning(model.name, padding))
    warnings += drafter_warnings(model, drafter)
    fp4 = gpu.fp4_kv_warning([kv_dtype, *(getattr(g, "kv_dtype", None) for g in model.kv_groups())])
    if fp4:
        warnings.append(fp4)
    return PlanResult(
        model=model.name,
        gpu=gpu.name,
        num_gpus=inputs.num_gpus,
        tp=tp,
        pp=pp,
        replicas=replicas,
        kv_dtype=kv_dtype,
        weight_dtype=w_dtype,
        params=params,
        gpu_mem_bytes=mem,
        gpu_memory_utilization=util,
        kv_bytes_per_token=kv_bytes_per_token(model, kv_dtype) + draft_bpt,
        kv_bytes_per_token_per_gpu=kv_bytes_per_token_per_gpu(model, tp, pp, kv_dtype) + draft_bpt_gpu,
        weights_bytes_per_gpu=w_gpu,
        weights_bytes=(w_avg + draft_w_gpu) * inputs.num_gpus,  # the node's total (every stage's)
        weights_bytes_per_gpu_by_stage=stage_w,
        reserve_bytes_per_gpu=inputs.reserve_bytes_per_gpu,
        kv_pool_bytes_per_gpu=pool_gpu,
        kv_pool_bytes=pool_gpu * inputs.num_gpus,
        headroom=inputs.headroom,
        usable_kv_pool_bytes=usable_gpu * inputs.num_gpus,
        output_tokens=inputs.output_tokens,
        shared_prefix_tokens=inputs.shared_prefix_tokens,
        contexts=contexts,
        warnings=warnings,
        requested_block_size_tokens=pages.requested_block_size_tokens,
        block_size_tokens=pages.block_size_tokens,
        state_page_bytes_per_gpu=pages.state_page_bytes,
        state_page_padded_bytes_per_gpu=pages.state_page_padded_bytes,
        kv_cache_group_size_layers=padding.group_size_layers,
        padding_layers=padding.total_padding_layers,
        mamba_cache_mode=inputs.mamba_cache_mode,
        kv_pool_leaves_out=pool_leaves_out(inputs.reserve_bytes_per_gpu),
        **_drafter_fields(drafter),
    )


#: vLLM's ``fp8_ds_mla`` KV format (DeepSeek sparse attention, V3.2): per token per layer
#: a 512-value latent in fp8, 4 fp32 scales (one per 128 values) and the 64-value rope
#: part kept in bf16: 512 + 4 x 4 + 64 x 2 = 656 B, where fp8 over the 576-value latent
#: counts 576 B
FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER = 512 + 4 * 4 + 64 * 2


def fp8_ds_mla_warning(model, kv_dtype: str, contexts, usable_gpu: float, parallel) -> str:
    """The caveat of a DeepSeek-sparse-attention model (an MLA group with an indexer
    beside it: V3.2) planned with fp8 KV, or "": vLLM stores its latent as
    ``fp8_ds_mla`` (``FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER``), more than the fp8 latent
    counted here, so the bytes per token and the concurrency at vLLM's size are given
    beside the plan's (each MLA layer of the most loaded stage adds the difference per
    token on every GPU, the latent being held whole on each rank)."""
    groups = model.kv_groups()
    mla = [g for g in groups if g.kind == "mla"]
    if kv_dtype != "fp8" or not mla or not any(g.kind == "indexer" for g in groups):
        return ""
    if any(getattr(g, "kv_dtype", None) not in (None, "fp8") for g in mla):
        return ""  # a group with its own dtype: not the fp8 latent this caveat is about
    g = mla[0]
    if (g.kv_lora_rank, g.qk_rope_head_dim) != (512, 64):
        return ""  # not the layout vLLM's fp8_ds_mla is defined for
    tp, pp, replicas = parallel
    counted = g.kv_lora_rank + g.qk_rope_head_dim
    extra = FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER - counted
    layers = model.num_layers
    stage = max(layers_per_stage(layers, pp))
    per_token = kv_bytes_per_token(model, kv_dtype) + layers * extra
    fits = ", ".join(
        f"{c.context_tokens:,}: {replicas * math.floor(usable_gpu / (c.kv_bytes_per_trajectory_charged_per_gpu + c.trajectory_tokens * stage * extra)):,} "
        f"(not {c.max_concurrent:,})" for c in contexts
    ) if usable_gpu > 0 else "none fit"  # fmt: skip
    return (
        f"{model.name} with fp8 KV: vLLM stores its MLA latent as fp8_ds_mla, "
        f"{FP8_DS_MLA_BYTES_PER_TOKEN_PER_LAYER} B per token per layer (512 fp8 + 4 x 4 B "
        f"scales + 64 x 2 B bf16 rope) where this plan counts {counted} B: "
        f"{per_token:,.0f} B per token, not {kv_bytes_per_token(model, kv_dtype):,.0f}; "
        f"concurrent trajectories at vLLM's size: {fits}"
    )


def padding_warning(model: str, padding: LayerPadding) -> str:
    """The note for vLLM's padding layers (its own log line reads "Add N padding layers")."""
    parts = ", ".join(
        f"{padding.padding_layers(name)} to the {n} {name!r} layers "
        f"(+{padding.padding_layers(name) / n:.2%} of their KV)"
        for name, n in padding.layers.items() if padding.padding_layers(name)
    )
    return (
        f"vLLM groups {model}'s KV in groups of {padding.group_size_layers} layers and adds "
        f"{parts}: padding layers hold blocks but no KV; counted in the KV per trajectory "
        "above (padding_bytes_per_trajectory)"
    )


def raised_block_warning(model: str, pages: PageUnification, counted: bool = False) -> str:
    """The note for a block size raised so an attention page holds a state page (vLLM);
    ``counted``: the capacity charges the block rounding and the padded pages
    (``running_state_breakdown``, ``mamba_cache_mode: none``)."""
    waste = expected_tail_waste_tokens(pages.block_size_tokens) * pages.attention_page_bytes_per_token
    where = ("counted in the capacity above (whole blocks, padded state pages, as a run "
             "charges them)" if counted else "not in the capacity above")  # fmt: skip
    return (
        f"block size {pages.requested_block_size_tokens} raised to {pages.block_size_tokens} "
        f"tokens for {model}, as vLLM does: an attention page must hold one state layer's "
        f"state ({pages.state_page_bytes:,.0f} B per GPU, padded to "
        f"{pages.state_page_padded_bytes:,.0f} B); block rounding then costs about "
        f"{waste:,.0f} B per attention layer per sequence per GPU, {where}"
    )


def no_pool_warning(mem_bytes: float, util: float, weights_bytes: float, reserve_bytes: float) -> str:
    """The warning for weights (and reserve) that leave no KV pool on a GPU."""
    held = f"{weights_bytes / GB:,.3f} GB of weights"
    if weights_bytes > mem_bytes * util:
        what = "weights"
    else:  # the weights fit; the reserve takes the rest
        what, held = "weights and reserve", held + f" + {reserve_bytes / GB:,.3f} GB reserved"
    return (
        f"{what} exceed memory x utilization: {held} per GPU > {mem_bytes / GB:,.3f} GB x "
        f"utilization {util:g} = {mem_bytes * util / GB:,.3f} GB, so the KV pool is 0 and no "
        "trajectory fits (raise --num-gpus or --tp, or lower --params)"
    )


def window_warning(model: str, window: int, context: int, output_tokens: int = 0) -> str:
    """The warning for a trajectory longer than the model's ``max_context_tokens``."""
    what = f"context {context:,}"
    if output_tokens:
        what += f" + {output_tokens:,} output = {context + output_tokens:,} tokens"
    else:
        what += " tokens"
    return f"{what} exceeds {model}'s window of {window:,} tokens (max_context_tokens)"


def saved_state_breakdown(
    model, tokens: int, tp: int, pp: int, kv_dtype, pages: PageUnification | None
) -> tuple[list[GroupKV], float, float]:
    """(``kv_breakdown`` of ``tokens``, and what it adds whole-model and per GPU) under
    ``mamba_cache_mode: all`` (``pages`` given): each state group holds a saved state at
    each of the ``cdiv(tokens, B)`` block boundaries, each state layer's a page padded to
    the attention page (vLLM's ``MambaSpec.page_size_bytes``), instead of one running
    state; unchanged (and 0, 0) without ``pages``."""
    groups = kv_breakdown(model, tokens, tp, pp, kv_dtype)
    if pages is None:
        return groups, 0.0, 0.0
    boundaries = -(-tokens // pages.block_size_tokens)
    return _states_as(model, tp, kv_dtype, groups, groups, boundaries * pages.state_page_padded_bytes)


def _states_as(model, tp: int, kv_dtype, groups: list[GroupKV], base: list[GroupKV],
               state_bytes_per_layer: float) -> tuple[list[GroupKV], float, float]:  # fmt: skip
    """``groups`` with each state group's bytes scaled so that a layer's state is
    ``state_bytes_per_layer`` (per GPU), and what that adds over ``base``, whole-model and
    per GPU."""
    own = {g.name: g.state_bytes_per_layer_per_gpu for g in group_bytes(model, tp, kv_dtype)}
    out = []
    for g in groups:
        if not g.state_bytes or not own.get(g.name):
            out.append(g)
            continue
        f = state_bytes_per_layer / own[g.name]  # per-layer state scales
        out.append(replace(g, state_bytes=g.state_bytes * f, bytes=g.bytes * f,
                           bytes_per_gpu=g.bytes_per_gpu * f,
                           padding_bytes=g.padding_bytes * f))  # fmt: skip
    whole = sum(g.bytes for g in out) - sum(g.bytes for g in base)
    gpu = sum(g.bytes_per_gpu for g in out) - sum(g.bytes_per_gpu for g in base)
    return out, whole, gpu


def running_state_breakdown(
    model, tokens: int, tp: int, pp: int, kv_dtype, pages: PageUnification | None
) -> tuple[list[GroupKV], float, float]:
    """(``kv_breakdown``, and what it adds whole-model and per GPU) of ``tokens`` as a run
    (and vLLM) charges a hybrid model with state layers under ``mamba_cache_mode: none``
    (``pages`` given): the token-held groups in whole blocks of the raised block size
    (``cdiv(tokens, B) x B`` tokens) and each state layer's running state in one page
    padded to the attention page (vLLM's ``MambaSpec.page_size_bytes``); unchanged (and
    0, 0) without ``pages``. Nemotron-H 8B, 1,024 tokens, one H100: 2 blocks of 528
    tokens x 16,384 B + 24 x 2,162,688 B = 69,206,016 B (unpadded: 68,583,424 B)."""
    groups = kv_breakdown(model, tokens, tp, pp, kv_dtype)
    if pages is None:
        return groups, 0.0, 0.0
    bs = pages.block_size_tokens
    paged = kv_breakdown(model, -(-tokens // bs) * bs, tp, pp, kv_dtype)
    return _states_as(model, tp, kv_dtype, paged, groups, pages.state_page_padded_bytes)


def _context_plan(
    model, context, inputs, parallel, kv_dtype, usable_gpu, saved, running=None, drafter=None
) -> tuple[ContextPlan, list[str]]:
    """One context's capacity, and the warnings it raises (window, nothing fitting);
    ``parallel`` is (tp, pp, replicas), ``saved`` the pages of ``mamba_cache_mode: all``,
    ``running`` those of ``none`` for a model with state layers (``running_state_breakdown``);
    ``drafter`` a speculative drafter's sizing (``_with_drafter``): its lookahead slots join
    the tokens whose KV a trajectory holds."""
    tp, pp, replicas = parallel
    total = context + inputs.output_tokens + (drafter.lookahead_tokens if drafter else 0)

    def per_gpu(tokens: int) -> float:
        extra = saved_state_breakdown(model, tokens, tp, pp, kv_dtype, saved)[2]
        return kv_bytes_for_context(model, tokens, tp, pp, kv_dtype, per_gpu=True) + extra

    groups, whole_extra, _ = saved_state_breakdown(model, total, tp, pp, kv_dtype, saved)
    traj_gpu = per_gpu(total)
    charged = traj_gpu + running_state_breakdown(model, total, tp, pp, kv_dtype, running)[2]
    result = dict(
        context_tokens=context,
        trajectory_tokens=context + inputs.output_tokens,
        kv_bytes_per_trajectory=kv_bytes_for_context(model, total, kv_dtype=kv_dtype) + whole_extra,
        kv_bytes_per_trajectory_per_gpu=traj_gpu,
        max_concurrent=replicas * math.floor(usable_gpu / charged),
        kv_bytes_per_trajectory_charged_per_gpu=charged,
        groups=groups,
        # the states split over TP ranks, so all GPUs add the whole model's extra
        kv_bytes_per_trajectory_all_gpus=kv_bytes_for_context_all_gpus(
            model, total, tp, pp, kv_dtype
        ) + whole_extra,
    )
    result["state_bytes_per_trajectory"] = sum(g.state_bytes for g in result["groups"])
    counts = _drafter_padding(model, drafter, result, (total, tp, kv_dtype, running))
    chunk = inputs.prefill_chunk_tokens
    steady = {g.name: n * g.bytes_per_layer(total)
              for g in group_bytes(model, 1, kv_dtype)
              for n in [counts.get(g.name, 0)]}  # fmt: skip
    top, at_peak = kv_peak_for_trajectory(model, context, total, chunk, kv_dtype, counts)
    excess = top - sum(steady.values())
    result["peak_kv_bytes_per_trajectory"] = result["kv_bytes_per_trajectory"] + max(0.0, excess)
    result["prefill_chunk_tokens"] = chunk
    result["groups"] = [
        replace(g, peak_bytes=g.bytes + (at_peak[g.name] - steady[g.name] if excess > 0 else 0.0))
        for g in result["groups"]
    ]
    result["padding_bytes_per_trajectory"] = sum(g.padding_bytes for g in result["groups"])
    if drafter is not None:
        _with_drafter(result, drafter, total, tp, usable_gpu, replicas)
        charged = result["kv_bytes_per_trajectory_charged_per_gpu"]
    window = model.max_context_tokens
    warnings = []
    if window is not None and result["trajectory_tokens"] > window:
        warnings.append(window_warning(model.name, window, context, inputs.output_tokens))
    pool = _pool_phrase(usable_gpu, inputs.headroom)
    if result["max_concurrent"] == 0 and usable_gpu > 0:
        warnings.append(
            f"context {context:,}: 0 trajectories fit: one needs {charged / GB:,.3f} GB "
            f"of KV per GPU and {pool}"
        )
    shared = inputs.shared_prefix_tokens
    if shared is not None:
        if not 0 <= shared <= context:
            raise KvsimError(
                f"--shared-prefix-tokens {shared} must be between 0 and the context {context}"
            )
        if saved is None and _has_states(model):  # no saved state: no prefix hit
            result["max_concurrent_shared"] = result["max_concurrent"]
            result["shared_prefix_bytes"] = 0.0
            warnings.append(no_saved_states_warning(model.name, context))
            return ContextPlan(**result), warnings
        shared_whole, stages = shared_prefix_split(
            model, total, shared, tp, pp, kv_dtype, states_shared=saved is not None
        )
        if drafter is not None:  # its prefix rides on the shared blocks, the rest private
            shared_whole, stages = _drafter_shared(model, drafter, (total, shared, tp, kv_dtype),
                                                   shared_whole, stages)  # fmt: skip
        if saved is not None:  # each state layer's pages at the prefix's block boundaries
            _, extra_whole, extra_gpu = saved_state_breakdown(model, shared, tp, pp, kv_dtype, saved)
            extra_total = saved_state_breakdown(model, total, tp, pp, kv_dtype, saved)[2]
            stages = [(s + extra_gpu, p + extra_total - extra_gpu) for s, p in stages]
            shared_whole += extra_whole
        fit, (shared_gpu, private_gpu), why = _shared_fit(context, shared, stages, usable_gpu, pool)
        result["max_concurrent_shared"] = replicas * fit
        result["shared_prefix_bytes"] = shared_whole
        result["shared_prefix_bytes_per_gpu"] = shared_gpu
        result["private_kv_bytes_per_trajectory_per_gpu"] = private_gpu
        warnings += why if usable_gpu > 0 else []
    return ContextPlan(**result), warnings


def _has_states(model) -> bool:
    """A model with state-space or linear-attention layers (a running state per sequence)."""
    return any(g.kind in STATE_KINDS for g in model.kv_groups())


def no_saved_states_warning(model: str, context: int) -> str:
    """``--shared-prefix-tokens`` on a model with state layers under ``--mamba-cache-mode
    none``: vLLM saves no state at block boundaries, so no prefix of it ever hits."""
    return (
        f"context {context:,}: --shared-prefix-tokens shares nothing on {model} under "
        "--mamba-cache-mode none: its state layers save no state at block boundaries, so a "
        "prefix never hits (kvsim run says prefix_hit_limited_by mamba); the shared column "
        "is the unshared one. --mamba-cache-mode all plans the sharing of vLLM's prefix "
        "caching (a Mamba model; linear attention needs vLLM's align mode, not modelled)"
    )


def _pool_phrase(usable_gpu: float, headroom: float) -> str:
    phrase = f"the usable KV pool per GPU is {usable_gpu / GB:,.3f} GB"
    return phrase + (f" after {headroom:.0%} headroom" if headroom else "")


def deciding_stage(stages: list[tuple[float, float]], usable_gpu: float) -> tuple[int, int]:
    """F37 with sharing, per GPU of each pipeline stage (``stages``: its shared prefix and
    one trajectory's private KV, both > 0 private): (the index of the stage that decides,
    the trajectories it fits): the prefix once, then whole private parts; the stage that
    fits the fewest decides, the first of them on a tie; -1 fits where the prefix alone
    does not fit."""
    fits = [math.floor((usable_gpu - s) / p) if usable_gpu >= s else -1 for s, p in stages]
    fit = min(fits)
    return fits.index(fit), fit


def _shared_fit(
    context: int, shared: int, stages: list[tuple[float, float]], usable_gpu: float, pool: str
) -> tuple[int, tuple[float, float], list[str]]:
    """F37 with sharing (``deciding_stage``): the trajectories that fit, the deciding
    stage's (shared prefix, private KV) per GPU, and why 0."""
    if any(private_gpu <= 0 for _, private_gpu in stages):
        raise KvsimError(
            f"--shared-prefix-tokens {shared}: each trajectory of context {context} holds no KV "
            "beyond the shared prefix, so capacity is unbounded; give --output-tokens or a "
            "shorter prefix"
        )
    index, fit = deciding_stage(stages, usable_gpu)
    stage = shared_gpu, private_gpu = stages[index]
    if fit < 0:
        return 0, stage, [
            f"context {context:,}: 0 trajectories fit with the shared prefix: the prefix "
            f"alone needs {shared_gpu / GB:,.3f} GB of KV per GPU and {pool}"
        ]
    if fit == 0:
        return 0, stage, [
            f"context {context:,}: 0 trajectories fit with the shared prefix: the prefix "
            f"({shared_gpu / GB:,.3f} GB per GPU) plus one trajectory's private "
            f"{private_gpu / GB:,.3f} GB, and {pool}"
        ]
    return fit, stage, []


# ------------------------------------------------------------------ speculative drafter


def _drafter(inputs: PlanInputs, tp: int, kv_dtype: str, target_weights_bytes: float) -> DrafterSizing | None:
    """The drafter's sizing (``sim.sizing.speculative``, the rule a run resolves), or None
    without ``--speculative-method``: an EAGLE head's weights are a layer's share of the
    plan's own target weights (``--params``, ``--weight-dtype``); a draft model's KV at
    ``--kv-dtype`` when given, else at its profile's."""
    if inputs.speculative_method is None:
        return None
    assert inputs.num_speculative_tokens is not None  # check_speculative
    return drafter_sizing(
        inputs.speculative_method, inputs.num_speculative_tokens, inputs.model,
        inputs.draft_model, tp, inputs.kv_dtype if inputs.draft_model is not None else kv_dtype,
        target_weights_bytes,
    )  # fmt: skip


def _drafter_fields(drafter: DrafterSizing | None) -> dict:
    """``PlanResult``'s drafter fields (their defaults without one)."""
    if drafter is None:
        return {}
    return dict(
        speculative_method=drafter.method,
        num_speculative_tokens=drafter.num_speculative_tokens,
        draft_model=drafter.draft_model,
        spec_draft_kv_bytes_per_token=drafter.kv_bytes_per_token,
        spec_draft_kv_bytes_per_token_per_gpu=drafter.kv_bytes_per_token_per_gpu,
        draft_weights_bytes_per_gpu=drafter.weights_bytes_per_gpu,
        spec_lookahead_tokens=drafter.lookahead_tokens,
        spec_grouped_draft_layers=drafter.grouped_layers,
    )


def drafter_warnings(model, drafter: DrafterSizing | None) -> list[str]:
    """What a run refuses that plan (without an allocator) cannot: speculative decoding on
    a model with state-space layers under a prefix-caching allocator."""
    if drafter is None or not _has_states(model):
        return []
    return [
        f"speculative decoding on {model.name} (state-space layers): kvsim run refuses it "
        "with a prefix-caching allocator (radix, paged_hash), as vLLM does not run it "
        f"({VLLM_ISSUE}); this plan holds for a run without a prefix cache (paged)"
    ]


def _drafter_padding(model, drafter: DrafterSizing | None, result: dict, at: tuple) -> dict[str, int]:
    """Each group's layers as allocated (the peak's ``counts``): the model's padded counts,
    changed by a drafter's grouped layers (``drafter_padding_layers``), which change
    ``result``'s groups and totals too (whole model, per GPU, charged, all GPUs: a group's
    bytes are its layers times one layer's, PP being 1 with a drafter). ``at``: the
    trajectory's held tokens, tp, the KV dtype and the running-state pages (the charged
    bytes of a state layer under mamba_cache_mode none)."""
    counts = padded_model_counts(model)
    extra = drafter_padding_layers(model, drafter.grouped_layers) if drafter else {}
    if not any(extra.values()):
        return counts
    tokens, tp, kv_dtype, running = at
    charged_by = {g.name: g.bytes_per_gpu for g in running_state_breakdown(
        model, tokens, tp, 1, kv_dtype, running)[0]} if running is not None else {}  # fmt: skip
    groups, whole, gpu, charged = [], 0.0, 0.0, 0.0
    for g in result["groups"]:
        e, n = extra.get(g.name, 0), g.num_layers + g.padding_layers
        f = e / n if n else 0.0
        whole += f * g.bytes
        gpu += f * g.bytes_per_gpu
        charged += f * charged_by.get(g.name, g.bytes_per_gpu)
        groups.append(replace(g, padding_layers=g.padding_layers + e, bytes=g.bytes * (1 + f),
                              bytes_per_gpu=g.bytes_per_gpu * (1 + f),
                              padding_bytes=g.padding_bytes + f * g.bytes))  # fmt: skip
    result["groups"] = groups
    result["kv_bytes_per_trajectory"] += whole
    result["kv_bytes_per_trajectory_per_gpu"] += gpu
    result["kv_bytes_per_trajectory_charged_per_gpu"] += charged
    result["kv_bytes_per_trajectory_all_gpus"] += gpu * tp
    return {name: n + extra.get(name, 0) for name, n in counts.items()}


def _with_drafter(result: dict, drafter: DrafterSizing, tokens: int, tp: int, usable_gpu: float,
                  replicas: int) -> None:  # fmt: skip
    """``result`` with the drafter's own KV (the ``draft`` group: its bytes per token over
    the ``tokens`` the trajectory holds, lookahead slots included, as a run charges them)
    in every total, and the capacity over the charged bytes that include it."""
    whole = drafter.kv_bytes_per_token * tokens
    gpu = drafter.kv_bytes_per_token_per_gpu * tokens
    if drafter.kv_bytes_per_token:
        result["groups"] = [*result["groups"], GroupKV(
            name="draft", kind=drafter.method, num_layers=drafter.num_layers,
            dtype=drafter.kv_dtype, window_tokens=None, held_tokens=tokens,
            bytes_per_token=drafter.kv_bytes_per_token, state_bytes=0.0, bytes=whole,
            bytes_per_gpu=gpu, peak_bytes=whole,
        )]  # fmt: skip
    for key, add in (("kv_bytes_per_trajectory", whole), ("peak_kv_bytes_per_trajectory", whole),
                     ("kv_bytes_per_trajectory_per_gpu", gpu),
                     ("kv_bytes_per_trajectory_charged_per_gpu", gpu),
                     ("kv_bytes_per_trajectory_all_gpus", gpu * tp)):  # fmt: skip
        result[key] += add
    result["spec_draft_kv_bytes_per_trajectory"] = whole
    result["max_concurrent"] = replicas * math.floor(
        usable_gpu / result["kv_bytes_per_trajectory_charged_per_gpu"])


def _drafter_shared(model, drafter: DrafterSizing, at: tuple, shared_whole: float,
                    stages: list[tuple[float, float]]) -> tuple[float, list[tuple[float, float]]]:  # fmt: skip
    """``shared_prefix_split``'s figures with the drafter: its KV rides on the block table,
    so its prefix tokens are shared with the target's and the rest (lookahead slots in) is
    each trajectory's own; the padding its grouped layers change is shared as its group's
    tokens are (``GroupBytes.shared_tokens``; a state layer's all private). ``at``: the
    held tokens, the shared prefix, tp and the KV dtype (PP is 1 with a drafter)."""
    tokens, prefix, tp, kv_dtype = at
    extra = drafter_padding_layers(model, drafter.grouped_layers)
    whole = {g.name: g for g in group_bytes(model, 1, kv_dtype)}
    s_whole = drafter.kv_bytes_per_token * prefix
    s_gpu = drafter.kv_bytes_per_token_per_gpu * prefix
    p_gpu = drafter.kv_bytes_per_token_per_gpu * (tokens - prefix)
    for g in group_bytes(model, tp, kv_dtype):
        e = extra.get(g.name, 0)
        common = g.shared_tokens(tokens, prefix)
        s_whole += e * common * whole[g.name].bytes_per_token_per_layer
        s_gpu += e * common * g.bytes_per_token_per_layer_per_gpu
        p_gpu += e * (g.bytes_per_layer(tokens, per_gpu=True) - common * g.bytes_per_token_per_layer_per_gpu)
    return shared_whole + s_whole, [(s + s_gpu, p + p_gpu) for s, p in stages]
