"""KV bytes per token and per trajectory: F1-F3, with GQA, MLA, TP, PP and layer groups.

Invariant: every function returns bytes (floats only where an element is a fraction of a
byte). ``kv_bytes_per_token`` is the whole model over all layers (F1); the ``_per_gpu``
forms are what one rank of the most loaded pipeline stage holds. An MLA latent is held
whole on every tensor-parallel rank; when TP exceeds the KV heads, heads are replicated so
each rank holds at least one (as vLLM does). A model's layers are summed group by group
(``sim.sizing.groups``): sliding windows and chunks cap what their layers hold, and a
state-space layer holds one fixed state per sequence. What a trajectory holds counts each
group's layers as vLLM allocates them, padding layers included (``sim.sizing.layer_padding``;
gemma-3-27b's 52 sliding layers as 60); per-token F1 figures count the real layers only. The
``kv_elems_*`` helpers describe
the profile's own attention fields (``num_kv_heads``, ``head_dim``, ``mla``) only.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.errors import KvsimError
from sim.profiles.schema import ModelProfile
from sim.sizing.groups import group_bytes
from sim.sizing.layer_padding import LayerPadding, vllm_stage_padding


def kv_bytes_per_token_f1(
    n_layers: int, n_kv_heads: int, head_dim: int, elem_bytes: float
) -> float:
    """F1: ``m_token = 2 * L * H_kv * d_head * b`` (K and V, all layers)."""
    return 2 * n_layers * n_kv_heads * head_dim * elem_bytes


def trajectory_kv_bytes(tokens: int, kv_bytes_per_token: float) -> float:
    """F2: ``M_KV = S * m_token``."""
    return tokens * kv_bytes_per_token


def block_bytes(block_size_tokens: int, kv_bytes_per_token: float) -> float:
    """F3: ``M_block = B * m_token``."""
    return block_size_tokens * kv_bytes_per_token


def kv_elems_per_token_per_layer(model: ModelProfile) -> int:
    """Stored elements per token per layer on one full copy: 2*H_kv*d_head, or the MLA latent."""
    if model.mla is not None:
        return model.mla.kv_lora_rank + model.mla.qk_rope_head_dim
    return 2 * model.num_kv_heads * model.head_dim


def kv_heads_per_rank(model: ModelProfile, tp: int) -> int:
    """KV heads one TP rank holds: H_kv/TP, at least 1 (replicated when TP > H_kv)."""
    if tp < 1:
        raise KvsimError(f"tp must be >= 1, got {tp}")
    if model.num_q_heads % tp:
        raise KvsimError(f"tp={tp} must divide the {model.num_q_heads} query heads of {model.name}")
    h = model.num_kv_heads
    if h % tp and tp % h:
        raise KvsimError(f"tp={tp} and the {h} KV heads of {model.name} must divide one another")
    return max(1, h // tp)


def kv_elems_per_token_per_layer_per_gpu(model: ModelProfile, tp: int) -> int:
    """Elements one rank stores per token per layer (MLA: the whole latent on every rank)."""
    if model.mla is not None:
        kv_heads_per_rank(model, tp)  # still validates tp against the query heads
        return kv_elems_per_token_per_layer(model)
    return 2 * kv_heads_per_rank(model, tp) * model.head_dim


def layers_per_stage(n_layers: int, pp: int) -> list[int]:
    """Layers of each pipeline stage as vLLM splits them (``get_pp_indices``): an equal
    share each, and the remainder one layer a stage from the second-to-last stage back
    (the last stage runs the norm and the LM head, the first the embedding): 80 layers
    in 3 stages 27 / 27 / 26, in 6 stages 13 / 13 / 13 / 14 / 14 / 13."""
    if pp < 1 or pp > n_layers:
        raise KvsimError(f"pp must be between 1 and the {n_layers} layers, got {pp}")
    base, extra = divmod(n_layers, pp)
    out = [base] * pp
    for i in range(2, extra + 2):
        out[-i] += 1
    return out


def _stage_counts(model: ModelProfile, pp: int, padded: bool = False) -> list[dict[str, int]]:
    """For each pipeline stage, how many of its layers each group has; ``padded``: as vLLM
    allocates them, each group's count raised to a whole number of KV cache groups
    (``sim.sizing.layer_padding``)."""
    stages = stage_layer_padding(model, pp)
    return [s.padded_layers if padded else s.layers for s in stages]


def stage_layer_padding(model: ModelProfile, pp: int) -> list[LayerPadding]:
    """vLLM's KV cache grouping of each pipeline stage of ``model`` (real and padded layers)."""
    return vllm_stage_padding(model.layer_group_names(), layers_per_stage(model.num_layers, pp))


def model_layer_padding(model: ModelProfile) -> LayerPadding:
    """vLLM's KV cache grouping of the whole model on one worker (group size, padding)."""
    return stage_layer_padding(model, 1)[0]


def padded_model_counts(model: ModelProfile) -> dict[str, int]:
    """The whole model's layers per group as vLLM allocates them on one worker (padding
    included); equal to the real counts for a model without padding."""
    return model_layer_padding(model).padded_layers


def kv_bytes_per_token(model: ModelProfile, kv_dtype: str | None = None) -> float:
    """F1 for the whole model (all layers of every token group, one copy), ignoring windows.

    State groups (Mamba, linear attention) store nothing per token and add nothing here.
    """
    return sum(g.num_layers * g.bytes_per_token_per_layer for g in group_bytes(model, 1, kv_dtype))


def kv_bytes_per_token_per_gpu(
    model: ModelProfile, tp: int = 1, pp: int = 1, kv_dtype: str | None = None
) -> float:
    """F1 on one rank of the most loaded stage (``m_token / TP`` for even GQA splits)."""
    groups = group_bytes(model, tp, kv_dtype)
    return max(
        sum(counts.get(g.name, 0) * g.bytes_per_token_per_layer_per_gpu for g in groups)
        for counts in _stage_counts(model, pp)
    )


def kv_bytes_for_context(
    model: ModelProfile,
    tokens: int,
    tp: int = 1,
    pp: int = 1,
    kv_dtype: str | None = None,
    per_gpu: bool = False,
) -> float:
    """KV bytes for one trajectory of ``tokens``: windows and chunks capped, states added.

    ``per_gpu=False``: the whole model, one copy (F2 when no layer slides and no layer
    keeps a state; one running state per state-space layer otherwise).
    ``per_gpu=True``: one rank of the most loaded pipeline stage.
    """
    if not per_gpu:
        whole = padded_model_counts(model)
        return sum(whole.get(g.name, 0) * g.bytes_per_layer(tokens)
                   for g in group_bytes(model, 1, kv_dtype))  # fmt: skip
    groups = group_bytes(model, tp, kv_dtype)
    return max(
        sum(counts.get(g.name, 0) * g.bytes_per_layer(tokens, per_gpu=True) for g in groups)
        for counts in _stage_counts(model, pp, padded=True)
    )


def kv_bytes_for_context_all_gpus(
    model: ModelProfile, tokens: int, tp: int = 1, pp: int = 1, kv_dtype: str | None = None
) -> float:
    """One trajectory's KV summed over the ``tp x pp`` GPUs of a replica: the whole-model
    figure plus what TP replicates (heads when TP > H_kv, MLA latents and indexer keys)."""
    groups = group_bytes(model, tp, kv_dtype)
    return tp * sum(
        sum(counts.get(g.name, 0) * g.bytes_per_layer(tokens, per_gpu=True) for g in groups)
        for counts in _stage_counts(model, pp, padded=True)
    )


def shared_prefix_split(
    model: ModelProfile,
    tokens: int,
    prefix: int,
    tp: int = 1,
    pp: int = 1,
    kv_dtype: str | None = None,
    states_shared: bool = False,
) -> tuple[float, list[tuple[float, float]]]:
    """Trajectories of ``tokens`` that share their first ``prefix`` tokens (F37 with
    sharing), at their peak: (the shared KV stored once, whole model, one copy; and per
    pipeline stage, (that shared KV, one trajectory's KV beyond it) on one rank).

    A group that keeps every token shares the prefix and holds ``tokens - prefix`` of its
    own; a sliding window or chunk holds its last tokens, and shares only those of them
    that lie in the prefix (``GroupBytes.shared_tokens``: none once the window has moved
    past it); a state-space layer's running state is each sequence's own, except with
    ``states_shared`` (vLLM's ``all`` Mamba cache mode, where a state layer keeps a state
    at every block boundary: the caller adds those pages, and counts the running state's
    block with the prefix's, as ``kvsim plan`` always has). Padding layers count as their
    group's (vLLM allocates them)."""
    whole = {g.name: g for g in group_bytes(model, 1, kv_dtype)}
    common = {name: g.shared_tokens(tokens, prefix) for name, g in whole.items()}
    shared_whole = sum(
        n * (common[name] * whole[name].bytes_per_token_per_layer
             + (whole[name].state_bytes_per_layer if states_shared else 0.0))
        for name, n in padded_model_counts(model).items()
    )  # fmt: skip
    per_gpu = group_bytes(model, tp, kv_dtype)
    stages = []
    for counts in _stage_counts(model, pp, padded=True):
        shared = private = 0.0
        for g in per_gpu:
            n = counts.get(g.name, 0)
            s = n * common[g.name] * g.bytes_per_token_per_layer_per_gpu
            if states_shared:
                s += n * g.state_bytes_per_layer_per_gpu
            shared += s
            private += n * g.bytes_per_layer(tokens, per_gpu=True) - s
        stages.append((shared, private))
    return shared_whole, stages


def prefill_steps(prompt: int, chunk: int) -> list[tuple[int, int]]:
    """The ``(computed, end)`` of each step of a prompt prefilled alone in chunks of
    ``chunk`` tokens (vLLM V1's chunked prefill, the token budget or
    ``long_prefill_token_threshold``): ``[0, c), [c, 2c), ..., [.., prompt)``."""
    if chunk < 1:
        raise KvsimError(f"prefill chunk must be >= 1 token, got {chunk}")
    return [(n, min(prompt, n + chunk)) for n in range(0, prompt, chunk)]


def kv_peak_for_trajectory(
    model: ModelProfile, prompt: int, tokens: int, chunk: int, kv_dtype: str | None = None,
    counts: dict[str, int] | None = None,
) -> tuple[float, dict[str, float]]:
    """The most one trajectory of ``tokens`` holds at any step when its ``prompt`` is
    prefilled alone in chunks of ``chunk`` (whole model, one copy, padding layers in), and
    each group's bytes at that step: the largest of its prefill steps by vLLM V1's rule
    (``GroupBytes.step_held_tokens``: a sliding window holds ``w - 1`` tokens plus the
    chunk) and the full trajectory (``kv_bytes_for_context``). Token-exact, as ``plan``
    (no block rounding). ``counts``: each group's layers as allocated, when not the
    model's own padded ones (a speculative drafter's grouped layers pad them otherwise,
    ``sim.sizing.speculative.drafter_padding_layers``)."""
    counts = padded_model_counts(model) if counts is None else counts
    groups = group_bytes(model, 1, kv_dtype)

    def at(computed: int, end: int) -> dict[str, float]:
        return {g.name: counts.get(g.name, 0) * (
            g.state_bytes_per_layer if g.holds_state
            else g.step_held_tokens(computed, end) * g.bytes_per_token_per_layer)
            for g in groups}  # fmt: skip

    best = {g.name: counts.get(g.name, 0) * g.bytes_per_layer(tokens) for g in groups}
    top = sum(best.values())
    if any(g.window_tokens is not None and not g.holds_state for g in groups):
        for computed, end in prefill_steps(min(prompt, tokens), chunk):
            step = at(computed, end)
            if sum(step.values()) > top:
                best, top = step, sum(step.values())
    return top, best


@dataclass(frozen=True)
class GroupKV:
    """One layer group's share of one trajectory's KV (``kvsim plan``'s breakdown)."""

    name: str
    kind: str
    num_layers: int
    dtype: str
    window_tokens: int | None
    held_tokens: int  # per layer (0 for a state group)
    bytes_per_token: float  # all the group's layers, one copy (0 for a state group)
    state_bytes: float  # one sequence's state over all the group's layers (0: token group)
    bytes: float  # the trajectory's bytes in this group, whole model, one copy, padding in
    bytes_per_gpu: float  # the same on one rank of the stage that holds the most
    # empty layers vLLM adds to this group's last KV cache group (sim.sizing.layer_padding),
    # whole model, and the part of ``bytes`` they take (allocated, never written)
    padding_layers: int = 0
    padding_bytes: float = 0.0
    #: this group's bytes at the trajectory's peak step (``kv_peak_for_trajectory``: a
    #: prefill chunk's for a sliding window or chunk, else ``bytes``)
    peak_bytes: float = 0.0


def kv_breakdown(
    model: ModelProfile, tokens: int, tp: int = 1, pp: int = 1, kv_dtype: str | None = None
) -> list[GroupKV]:
    """Each group's share of a trajectory of ``tokens``; the shares sum to the totals of
    ``kv_bytes_for_context`` (whole model, and per GPU on the most loaded stage)."""
    whole = {g.name: g for g in group_bytes(model, 1, kv_dtype)}
    per_gpu = group_bytes(model, tp, kv_dtype)
    stages = _stage_counts(model, pp, padded=True)
    loads = [sum(c.get(g.name, 0) * g.bytes_per_layer(tokens, True) for g in per_gpu) for c in stages]
    heaviest = stages[loads.index(max(loads))]
    padded = padded_model_counts(model)
    out = []
    for g in per_gpu:
        w = whole[g.name]
        n = padded.get(g.name, 0)
        out.append(
            GroupKV(
                name=g.name,
                kind=g.kind,
                num_layers=g.num_layers,
                dtype=g.dtype,
                window_tokens=g.window_tokens,
                held_tokens=g.held_tokens(tokens),
                bytes_per_token=g.num_layers * w.bytes_per_token_per_layer,
                state_bytes=g.num_layers * w.state_bytes_per_layer,
                bytes=n * w.bytes_per_layer(tokens),
                bytes_per_gpu=heaviest.get(g.name, 0) * g.bytes_per_layer(tokens, True),
                padding_layers=n - g.num_layers,
                padding_bytes=(n - g.num_layers) * w.bytes_per_layer(tokens),
            )
        )
    return out
