"""Node pool and concurrency: F4, F5 and the capacity planning formulas F34-F37.

Invariant: inputs and outputs in bytes and tokens; concurrency results are floors (a
trajectory either fits whole or not at all) and never negative.
"""

from __future__ import annotations

import math

from sim.errors import KvsimError


def kv_pool_bytes(
    hbm_bytes: float, weights_bytes: float, runtime_bytes: float, *, allow_empty: bool = False
) -> float:
    """F4 / F34: ``M_pool = HBM - weights - runtime``; when nothing is left, 0 with
    ``allow_empty`` (a plan that warns), else an error."""
    pool = hbm_bytes - weights_bytes - runtime_bytes
    if pool <= 0 and allow_empty:
        return 0.0
    if pool <= 0:
        raise KvsimError(
            f"no memory left for KV: {hbm_bytes:.4g} B of HBM, {weights_bytes:.4g} B of weights, "
            f"{runtime_bytes:.4g} B reserved"
        )
    return pool


def weights_bytes_per_gpu(
    params: float, weight_elem_bytes: float, tp: int = 1, pp: int = 1
) -> float:
    """F34: ``M_weights = N_params * b_weight / (TP * PP)``."""
    return params * weight_elem_bytes / (tp * pp)


def stage_weight_bytes(
    weights_bytes: float,
    layers: list[int],
    vocab_size: int | None,
    d_model: int,
    embed_bytes_per_param: float,
) -> list[float] | None:
    """Weight bytes of each pipeline stage as vLLM places them: the token embedding
    (``V x d`` parameters at ``embed_bytes_per_param``, the dense weights' dtype) on the
    first stage, the LM head (``V x d``, its own copy even when the checkpoint ties it,
    since the last stage computes the logits) on the last, and the rest
    ``(weights - 2 V d b_embed) / L`` per layer (every layer the same size: exact for an
    untied checkpoint, the profiles that state ``vocab_size``; experts in a smaller format
    lower the layers' bytes, not the embedding's). None where it cannot say: one stage
    (nothing to split), no ``vocab_size``, or weights <= the two embeddings."""
    if len(layers) < 2 or vocab_size is None:
        return None
    embed = float(vocab_size) * d_model * embed_bytes_per_param
    per_layer = (weights_bytes - 2 * embed) / sum(layers)
    if per_layer <= 0:
        return None
    out = [n * per_layer for n in layers]
    out[0] += embed
    out[-1] += embed
    return out


def max_concurrent(pool_bytes: float, tokens: int, kv_bytes_per_token: float) -> int:
    """F5: ``B_max = floor(pool / (S * m_token))``."""
    return max(0, math.floor(pool_bytes / (tokens * kv_bytes_per_token)))


def kv_demand_bytes(
    n_trajectories: int,
    mean_context_tokens: float,
    mean_output_tokens: float,
    kv_bytes_per_token: float,
) -> float:
    """F35: ``B * (M_avg + K_avg) * m_token`` (no sharing)."""
    return n_trajectories * (mean_context_tokens + mean_output_tokens) * kv_bytes_per_token


def kv_demand_shared_bytes(
    n_trajectories: int,
    mean_context_tokens: float,
    mean_output_tokens: float,
    kv_bytes_per_token: float,
    sigma: float,
    shared_tokens: float,
    headroom_bytes: float = 0.0,
) -> float:
    """F36: ``(S_shared + B*((1-sigma)*M_avg + K_avg)) * m_token + headroom``."""
    if not 0 <= sigma < 1:
        raise KvsimError(f"sigma must be in [0, 1), got {sigma}")
    per = (1 - sigma) * mean_context_tokens + mean_output_tokens
    return (shared_tokens + n_trajectories * per) * kv_bytes_per_token + headroom_bytes


def capacity_unshared(
    pool_bytes: float,
    kv_bytes_per_token: float,
    mean_context_tokens: float,
    mean_output_tokens: float,
    headroom: float = 0.10,
) -> int:
    """F37: ``floor((1-headroom) * N_capacity / (M_avg + K_avg))``."""
    usable_tokens = (1 - headroom) * pool_bytes / kv_bytes_per_token
    return max(0, math.floor(usable_tokens / (mean_context_tokens + mean_output_tokens)))


def capacity_shared(
    pool_bytes: float,
    kv_bytes_per_token: float,
    unique_context_tokens: float,
    mean_output_tokens: float,
    shared_tokens: float,
    headroom: float = 0.10,
) -> int:
    """F37 with sharing: ``floor(((1-h)*pool - S_shared*m) / ((M_unique + K_avg)*m))``."""
    free = (1 - headroom) * pool_bytes - shared_tokens * kv_bytes_per_token
    per = (unique_context_tokens + mean_output_tokens) * kv_bytes_per_token
    return max(0, math.floor(free / per))
