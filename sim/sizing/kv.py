"""KV bytes per token and per trajectory: F1-F3, with GQA, MLA, TP, PP and sliding windows.

Invariant: every function returns bytes (floats only where an element is a fraction of a
byte). ``kv_bytes_per_token`` is the whole model over all layers (F1); the ``_per_gpu``
forms are what one rank of the most loaded pipeline stage holds. An MLA latent is held
whole on every tensor-parallel rank; when TP exceeds the KV heads, heads are replicated so
each rank holds at least one (as vLLM does).
"""

from __future__ import annotations

from sim.errors import KvsimError
from sim.profiles.schema import ModelProfile
from sim.units import dtype_bytes


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
    """Layers of each pipeline stage; the remainder goes to the first stages."""
    if pp < 1 or pp > n_layers:
        raise KvsimError(f"pp must be between 1 and the {n_layers} layers, got {pp}")
    base, extra = divmod(n_layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def kv_bytes_per_token(model: ModelProfile, kv_dtype: str | None = None) -> float:
    """F1 for the whole model (all layers, one copy), ignoring sliding windows."""
    b = dtype_bytes(kv_dtype or model.kv_dtype)
    return model.num_layers * kv_elems_per_token_per_layer(model) * b


def kv_bytes_per_token_per_gpu(
    model: ModelProfile, tp: int = 1, pp: int = 1, kv_dtype: str | None = None
) -> float:
    """F1 on one rank of the most loaded stage (``m_token / TP`` for even GQA splits)."""
    b = dtype_bytes(kv_dtype or model.kv_dtype)
    return (
        max(layers_per_stage(model.num_layers, pp))
        * kv_elems_per_token_per_layer_per_gpu(model, tp)
        * b
    )


def _held_tokens_per_layer(model: ModelProfile, tokens: int) -> list[int]:
    """Tokens each layer holds for a context: all of them, or the window for sliding layers."""
    window = model.sliding_window.window_tokens if model.sliding_window else None
    return [tokens if k == "full" else min(tokens, window) for k in model.layer_kinds()]


def kv_bytes_for_context(
    model: ModelProfile,
    tokens: int,
    tp: int = 1,
    pp: int = 1,
    kv_dtype: str | None = None,
    per_gpu: bool = False,
) -> float:
    """KV bytes for one trajectory of ``tokens``, capped by sliding windows.

    ``per_gpu=False``: the whole model, one copy (F2 when no layer slides).
    ``per_gpu=True``: one rank of the most loaded pipeline stage.
    """
    b = dtype_bytes(kv_dtype or model.kv_dtype)
    held = _held_tokens_per_layer(model, tokens)
    if not per_gpu:
        return sum(held) * kv_elems_per_token_per_layer(model) * b
    per_layer = kv_elems_per_token_per_layer_per_gpu(model, tp) * b
    stages, start = [], 0
    for n in layers_per_stage(model.num_layers, pp):
        stages.append(sum(held[start : start + n]) * per_layer)
        start += n
    return max(stages)
